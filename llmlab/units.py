"""The course's units of memory: GB means 10^9 bytes and MB 10^6, as GPU makers and papers use
them (a GiB, 2^30 bytes, is 7% more). Every package imports them from here, so a figure in one
lab reads the same in the next.
"""

GB = 10**9  # the course's unit: GB means 10^9 bytes, as GPU makers and papers use it
MB = 10**6  # and MB 10^6 (MiB, 2^20, only where a tool reports it: DCGM)
