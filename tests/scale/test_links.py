"""Interconnects as alpha-beta pairs: quoted speeds converted once (bits to bytes, NVLink's two
directions to one, PCIe's line encoding), the time of a send, presets by name, and a bandwidth
or latency that is not a number refused."""

import math

import pytest

from llmlab.scale.links import LINKS, Link, gbit_to_bytes, link


def test_network_speeds_are_bits_not_bytes():
    assert gbit_to_bytes(400) == 50e9
    assert LINKS["ib-ndr"].bandwidth == 50e9  # 400 Gb/s; 400e9 would be bits taken for bytes
    assert LINKS["nvlink4"].bandwidth == 450e9  # 900 GB/s counts both directions


def test_nvlink_3_is_half_its_quoted_600_and_pcie_loses_its_encoding():
    assert LINKS["nvlink3"].bandwidth == 300e9
    assert LINKS["ib-hdr"].bandwidth == 25e9
    # 16 lanes x 16 GT/s = 32 GB/s raw; 128b/130b leaves 31.5 (the figure PCI-SIG quotes)
    assert LINKS["pcie4"].bandwidth == pytest.approx(31.5e9, rel=1e-3)
    assert LINKS["pcie5"].bandwidth == 2 * LINKS["pcie4"].bandwidth


def test_a_send_costs_a_latency_per_message_and_its_bytes_over_the_bandwidth():
    slow = Link("test", bandwidth=1e9, latency=1e-5)
    assert slow.seconds(2e9) == pytest.approx(2 + 1e-5)
    assert slow.seconds(2e9, messages=4) == pytest.approx(2 + 4e-5)
    assert slow.seconds(0, messages=3) == pytest.approx(3e-5)


def test_a_preset_is_found_by_name_and_a_link_passes_as_it_is():
    own = Link("mine", bandwidth=1e9, latency=0)
    assert link(own) is own
    assert link("roce-400") is LINKS["roce-400"]
    with pytest.raises(ValueError, match="unknown link 'infiniband': use one of nvlink4, nvlink3, "
                       r"pcie4, pcie5, ib-hdr, ib-ndr, roce-400, or a Link\(...\)"):
        link("infiniband")


@pytest.mark.parametrize("bandwidth, latency", [
    (0, 0), (-1e9, 0), (math.nan, 0), (1e9, -1e-6), (1e9, math.nan),
])
def test_a_bandwidth_or_latency_out_of_range_is_refused(bandwidth, latency):
    with pytest.raises(ValueError, match=f"link 'bad' needs a positive bandwidth and a latency "
                       f">= 0, got {bandwidth} B/s and {latency} s"):
        Link("bad", bandwidth=bandwidth, latency=latency)
