"""Interconnects as alpha-beta pairs: quoted speeds converted once (bits to bytes, NVLink's two
directions to one, PCIe's line encoding), the time of a send, presets by name, and a bandwidth
or latency that is not a number refused."""

import math

import pytest

from llmlab.scale.links import LINKS, Link, fit_link, gbit_to_bytes, link


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


def test_a_link_fitted_to_exact_times_gives_back_its_alpha_and_beta():
    sizes = [1e3, 1e5, 1e6, 4e6]
    fitted = fit_link("measured", sizes, [20e-6 + s / 2e9 for s in sizes])
    assert fitted.latency == pytest.approx(20e-6) and fitted.bandwidth == pytest.approx(2e9)
    # Noise around the line moves the fit a little, not the order of magnitude.
    noisy = fit_link("measured", sizes, [(20e-6 + s / 2e9) * f for s, f in
                                         zip(sizes, (1.1, 0.9, 1.05, 0.97), strict=True)])
    assert 1.5e9 < noisy.bandwidth < 2.5e9


def test_a_fit_below_zero_latency_keeps_zero():
    assert fit_link("fast start", [1e3, 2e3], [0.0, 2e-6]).latency == 0.0


@pytest.mark.parametrize("sizes, seconds, message", [
    ([1e3], [1e-5], "two sizes or more"),
    ([1e3, 1e3], [1e-5, 2e-5], "2 sizes .1 different"),
    ([1e3, 1e6], [1e-5], "one time per size"),
    ([1e3, 1e6], [2e-5, 1e-5], "do not grow with the message size"),
])
def test_a_fit_that_cannot_be_made_says_why(sizes, seconds, message):
    with pytest.raises(ValueError, match=message):
        fit_link("bad", sizes, seconds)
