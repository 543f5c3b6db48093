"""The published LLaMA-7B table: its figures as the source prints them, and how it is shown."""

from llmlab.quant.published import LLAMA7B_FP16_WIKITEXT2, LLAMA7B_WIKITEXT2, published_table


def test_the_figures_are_the_sources_and_say_what_the_lab_claims_of_them():
    # OmniQuant's Table 1, LLaMA-1 7B column (a typo here would change what the lab says)
    assert LLAMA7B_FP16_WIKITEXT2 == 5.68
    assert LLAMA7B_WIKITEXT2[(3, "channel")] == {"RTN": 25.73, "GPTQ": 8.06, "AWQ": 11.88}
    assert LLAMA7B_WIKITEXT2[(4, 128)] == {"RTN": 5.96, "GPTQ": 5.85, "AWQ": 5.81}
    # the lab's claims: GPTQ beats RTN in every setting, by far the most at 3 bits per channel
    gains = {key: m["RTN"] / m["GPTQ"] for key, m in LLAMA7B_WIKITEXT2.items()}
    assert all(gain > 1 for gain in gains.values())
    assert max((k for k in gains if k[0] > 2), key=gains.get) == (3, "channel")


def test_the_table_names_its_source_and_marks_what_was_not_reported():
    text = published_table()
    assert text.startswith("Shao et al. 2024 (OmniQuant), Table 1")
    assert "25.73 (x4.53)" in text and "1.1e+05" in text
    assert text.splitlines()[-1].endswith("| -")  # AWQ at 2 bits per channel: not reported
