"""NF4, the 4-bit NormalFloat of QLoRA (Dettmers, Pagnoni, Holtzman & Zettlemoyer 2023,
"QLoRA: Efficient Finetuning of Quantized LLMs", Sec. 3): 16 values at quantiles of the
standard normal, normalised to [-1, 1], for weights that are roughly normal once each block is
divided by its absmax. Asymmetric by design: 8 positive values, 7 negative and an exact 0 (a
symmetric 4-bit grid cannot hold 0 and use all 16 codes). The outermost quantiles would be
infinite, so the probabilities stop at an offset: halfway between 1 - 1/(2*15) and
1 - 1/(2*16), the paper's 0.9677. Built as bitsandbytes' create_normal_map builds it, which gives
its table bit for bit: probabilities in float32, quantiles in float64 (scipy's norm.ppf there),
then float32 again for the normalisation.
"""

import torch

from llmlab.models.finite import require_finite

NF4_OFFSET = 0.9677083  # 1 - (1/30 + 1/32) / 2 = 0.96770833..., to bitsandbytes' 7 digits


def nf4_codebook() -> torch.Tensor:
    """The 16 NF4 values, ascending, in float32: from -1 to 1 through an exact 0."""

    def quantiles(count: int) -> torch.Tensor:  # count - 1 of them, from the offset towards 0.5
        probabilities = torch.linspace(NF4_OFFSET, 0.5, count, dtype=torch.float32)[:-1]
        return torch.special.ndtri(probabilities.double()).float()

    values = torch.cat([quantiles(9), torch.zeros(1), -quantiles(8)]).sort().values
    return values / values.max()


def nf4_quantize(weight: torch.Tensor, block_size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes 0..15 as uint8, absmax per block): each block of `block_size` consecutive values
    (64 in QLoRA) is divided by its absmax and mapped to the nearest codebook value."""
    if block_size <= 0 or weight.numel() % block_size:
        raise ValueError(
            f"NF4 block size {block_size} does not divide the tensor's {weight.numel()} values: "
            "use a divisor (QLoRA uses 64)"
        )
    require_finite(weight, "the weight to quantize")  # NaN would map to a valid code, silently
    blocks = weight.detach().float().reshape(-1, block_size)
    absmax = blocks.abs().amax(-1, keepdim=True)
    scaled = blocks / torch.where(absmax > 0, absmax, 1)
    codes = (scaled[..., None] - nf4_codebook()).abs().argmin(-1)
    return codes.to(torch.uint8).reshape(weight.shape), absmax.squeeze(-1)


def nf4_dequantize(codes: torch.Tensor, absmax: torch.Tensor) -> torch.Tensor:
    """Codebook value times its block's absmax, in the codes' shape."""
    blocks = nf4_codebook()[codes.long()].reshape(absmax.numel(), -1)
    return (blocks * absmax[:, None]).reshape(codes.shape)
