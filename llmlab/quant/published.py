"""Published weight-only quantization results on a real model, as data, beside the course's own.

LLaMA-1 7B, WikiText-2 perplexity, from Shao et al. 2024, "OmniQuant:
Omnidirectionally Calibrated Quantization for Large Language Models" (ICLR 2024, arXiv
2308.13137), Table 1, which reran RTN, GPTQ and AWQ in one setting (per output channel unless
a group size is named). FP16: 5.68. OmniQuant's own rows are left out: the lab does not build it.
"""

from llmlab.tables import markdown_table

LLAMA7B_FP16_WIKITEXT2 = 5.68
SOURCE = "Shao et al. 2024 (OmniQuant), Table 1: LLaMA-1 7B, WikiText-2 perplexity"
# (bits, group size or "channel") -> method -> perplexity; None: not reported (AWQ needs groups)
LLAMA7B_WIKITEXT2 = {
    (4, "channel"): {"RTN": 6.43, "GPTQ": 6.13, "AWQ": 6.08},
    (4, 128): {"RTN": 5.96, "GPTQ": 5.85, "AWQ": 5.81},
    (3, "channel"): {"RTN": 25.73, "GPTQ": 8.06, "AWQ": 11.88},
    (3, 128): {"RTN": 7.01, "GPTQ": 6.55, "AWQ": 6.46},
    (2, 128): {"RTN": 1.9e3, "GPTQ": 44.01, "AWQ": 2.6e5},
    (2, "channel"): {"RTN": 1.1e5, "GPTQ": 2.1e3, "AWQ": None},
}


def published_table() -> str:
    """The table as text, each perplexity with its cost over FP16."""
    rows = []
    for (bits, group), methods in LLAMA7B_WIKITEXT2.items():
        row = {"weights": f"int{bits}, " + ("per channel" if group == "channel" else f"g{group}")}
        for method, value in methods.items():
            row[method] = "-" if value is None else (
                f"{value:.2f} (x{value / LLAMA7B_FP16_WIKITEXT2:.2f})" if value < 1000
                else f"{value:.1e}")
        rows.append(row)
    return f"{SOURCE} (FP16 {LLAMA7B_FP16_WIKITEXT2})\n" + markdown_table(rows)
