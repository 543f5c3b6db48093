from llmlab.env.interconnect import summarize_topology

NV12_MATRIX = """\
\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV12\tNV12\t0-47\t0\t\tN/A
GPU1\tNV12\t X \tNV12\t0-47\t0\t\tN/A
GPU2\tNV12\tNV12\t X \t0-47\t0\t\tN/A

Legend:

  X    = Self
  NV#  = Connection traversing a bonded set of # NVLinks
"""


PCIE_MATRIX = """\
\t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\x1b[0m
\x1b[4mGPU0\x1b[0m\t X \tPIX\tPHB\tSYS\tPIX\t0-15\t0
\x1b[4mGPU1\x1b[0m\tPIX\t X \tPHB\tSYS\tPIX\t0-15\t0
\x1b[4mGPU2\x1b[0m\tPHB\tPHB\t X \tSYS\tSYS\t0-15\t0
\x1b[4mGPU3\x1b[0m\tSYS\tSYS\tSYS\t X \tSYS\t16-31\t1
NIC0\tPIX\tPIX\tSYS\tSYS\t X

Legend:
  PIX  = Connection traversing at most a single PCIe bridge
"""


def test_summarize_topology_all_nvlink():
    assert summarize_topology(NV12_MATRIX) == "NVLink (NV12) between all pairs"


def test_summarize_topology_pcie_only_ignores_nics_and_escape_codes():
    assert summarize_topology(PCIE_MATRIX) == "PCIe only (PHB, PIX, SYS)"


def test_summarize_topology_returns_unparsable_text_as_is():
    assert summarize_topology("no topology here\n") == "no topology here"
