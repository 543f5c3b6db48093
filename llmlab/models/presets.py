"""Model shapes (presets) and builders: a shape becomes a `transformers` config, then a model.

A `ModelShape` is plain numbers (layers, width, heads, vocabulary, ...), so the memory planner can
do arithmetic on a 70B model without building it; `build_model` turns a shape into a real
GPT-2 or Llama model on the CPU, a GPU, or the `meta` device (shapes only, no memory).
"""

import dataclasses
from dataclasses import dataclass

import torch
from torch import nn
from transformers import (
    AutoModelForCausalLM,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
)

from llmlab.vocab_sizes import VOCAB_SIZES

FAMILIES = ("gpt2", "llama")
ATTENTION = ("sdpa", "eager")  # fused scaled-dot-product attention, or the textbook matmuls
SMOKE_VOCAB = VOCAB_SIZES["smoke"]  # of the tokenizer Lab 01 trains at smoke


@dataclass(frozen=True)
class ModelShape:
    """The numbers that fix a decoder-only transformer's size.

    `family` decides the block: "gpt2" (LayerNorm, GELU MLP of width d_ff, biases, learned
    positions) or "llama" (RMSNorm, SwiGLU MLP, no biases, rotary positions, grouped-query
    attention with n_kv_head key/value heads). A llama shape with `n_experts` is a mixture of
    experts in Mixtral's form: every block's MLP is `n_experts` SwiGLU experts of width d_ff and
    a router that sends each token to `top_k` of them.
    """

    family: str
    n_layer: int
    d_model: int
    n_head: int
    vocab_size: int
    context: int  # the longest sequence the model takes
    d_ff: int = 0  # MLP width; 0 means 4 * d_model
    n_kv_head: int = 0  # key/value heads; 0 means n_head (plain multi-head attention)
    tied_embeddings: bool = True  # the LM head reuses the token-embedding matrix
    n_experts: int = 0  # experts per block; 0 means a dense MLP
    top_k: int = 0  # experts each token goes to (with n_experts)
    source: str = ""  # where the numbers come from

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"unknown model family {self.family!r}: use one of {FAMILIES}")
        for name in ("n_layer", "d_model", "n_head", "vocab_size", "context"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in ("d_ff", "n_kv_head", "n_experts", "top_k"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a positive integer (or 0 for the default)")
        if self.n_experts or self.top_k:
            if self.family != "llama":
                raise ValueError("mixtures of experts are llama shapes here (Mixtral's block): "
                                 "use family='llama' or leave n_experts and top_k at 0")
            if not 1 <= self.top_k <= self.n_experts or self.n_experts < 2:
                raise ValueError(f"a mixture of experts needs n_experts >= 2 and top_k from 1 "
                                 f"to n_experts, got n_experts={self.n_experts}, "
                                 f"top_k={self.top_k}")
        if self.d_model % self.n_head:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_head={self.n_head}: each head gets "
                "d_model / n_head dimensions, so pick a width that is a multiple of the heads"
            )
        if self.n_head % self.kv_heads:
            raise ValueError(
                f"n_head={self.n_head} is not a multiple of n_kv_head={self.n_kv_head}: "
                "each key/value head must serve the same number of query heads"
            )
        if self.family == "gpt2" and self.kv_heads != self.n_head:
            raise ValueError("the gpt2 family has no grouped-query attention: leave n_kv_head at 0")

    @property
    def ff(self) -> int:
        """MLP hidden width (d_ff, defaulting to 4 * d_model)."""
        return self.d_ff or 4 * self.d_model

    @property
    def experts(self) -> int:
        """MLPs per block: n_experts, or the dense model's one."""
        return self.n_experts or 1

    @property
    def active_experts(self) -> int:
        """MLPs each token runs through: top_k, or the dense model's one."""
        return self.top_k or 1

    @property
    def kv_heads(self) -> int:
        return self.n_kv_head or self.n_head

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def kv_dim(self) -> int:
        """Width of the keys (and of the values): d_model for multi-head attention."""
        return self.kv_heads * self.head_dim

    def replace(self, **changes) -> "ModelShape":
        """A copy with some numbers changed, checked again: `shape.replace(n_layer=8)`."""
        return dataclasses.replace(self, **changes)

    def config(self, attention: str = "sdpa") -> GPT2Config | LlamaConfig | MixtralConfig:
        """The `transformers` config for this shape.

        No dropout (modern pre-training uses none, and it would add masks to the activations);
        no bos/eos ids, because those belong to the tokenizer, not to the shape.
        """
        if attention not in ATTENTION:
            raise ValueError(f"unknown attention {attention!r}: use one of {ATTENTION}")
        common = dict(vocab_size=self.vocab_size, tie_word_embeddings=self.tied_embeddings,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None,
                      attn_implementation=attention)
        if self.family == "gpt2":
            return GPT2Config(
                n_layer=self.n_layer, n_embd=self.d_model, n_head=self.n_head,
                n_inner=self.ff, n_positions=self.context,
                # The same tanh GELU as GPT-2's "gelu_new", but one fused op: the Python
                # version keeps four tensors per MLP for the backward pass, this one keeps one.
                activation_function="gelu_pytorch_tanh",
                resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **common,
            )
        llama = dict(num_hidden_layers=self.n_layer, hidden_size=self.d_model,
                     num_attention_heads=self.n_head, num_key_value_heads=self.kv_heads,
                     intermediate_size=self.ff, max_position_embeddings=self.context, **common)
        if self.n_experts:
            return MixtralConfig(num_local_experts=self.n_experts,
                                 num_experts_per_tok=self.top_k, **llama)
        return LlamaConfig(**llama)


def _gpt2(n_layer, d_model, n_head, context=1024, vocab_size=50257, source=""):
    return ModelShape("gpt2", n_layer, d_model, n_head, vocab_size, context, source=source)


_GPT2_SOURCE = "OpenAI GPT-2 (Radford et al. 2019), Hugging Face configs gpt2, gpt2-medium, gpt2-xl"
_LLAMA2_SOURCE = "Llama 2 (Touvron et al. 2023), table of model shapes / Hugging Face configs"

PRESETS: dict[str, ModelShape] = {
    "tiny": _gpt2(4, 256, 4, context=256, vocab_size=SMOKE_VOCAB,
                  source="the course's smoke model (Lab 03 trains it on a CPU)"),
    "small": _gpt2(6, 384, 6, context=512, vocab_size=SMOKE_VOCAB,
                   source="nanoGPT's 'baby GPT' shape (6 layers, 6 heads, width 384)"),
    "gpt2-124m": _gpt2(12, 768, 12, source=_GPT2_SOURCE),
    "gpt2-350m": _gpt2(24, 1024, 16, source=_GPT2_SOURCE),
    "gpt2-1.5b": _gpt2(48, 1600, 25, source=_GPT2_SOURCE),
    "llama-1b": ModelShape(
        "llama", 16, 2048, 32, 128256, 131072, d_ff=8192, n_kv_head=8, tied_embeddings=True,
        source="Llama 3.2 1B's published config (Meta 2024): 16 layers, width 2048, 8 KV heads",
    ),
    "llama-7b": ModelShape("llama", 32, 4096, 32, 32000, 4096, d_ff=11008,
                           tied_embeddings=False, source=_LLAMA2_SOURCE),
    "llama-13b": ModelShape("llama", 40, 5120, 40, 32000, 4096, d_ff=13824,
                            tied_embeddings=False, source=_LLAMA2_SOURCE),
    "llama-70b": ModelShape("llama", 80, 8192, 64, 32000, 4096, d_ff=28672, n_kv_head=8,
                            tied_embeddings=False, source=_LLAMA2_SOURCE),
    "mixtral-8x7b": ModelShape(
        "llama", 32, 4096, 32, 32000, 32768, d_ff=14336, n_kv_head=8, tied_embeddings=False,
        n_experts=8, top_k=2,
        source="Mixtral of Experts (Jiang et al. 2024), Table 1: 32 layers, width 4096, FFN "
               "14,336, 8 KV heads, 8 experts, top 2, context 32,768",
    ),
}


def preset(name: str, **changes) -> ModelShape:
    """The shape called `name`, optionally changed: `preset("tiny", vocab_size=4096)`."""
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}: the presets are {', '.join(PRESETS)}")
    return PRESETS[name].replace(**changes) if changes else PRESETS[name]


def as_shape(model: str | ModelShape) -> ModelShape:
    """Accept a preset name or a shape."""
    return preset(model) if isinstance(model, str) else model


def build_model(
    model: str | ModelShape,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    attention: str = "sdpa",
    seed: int | None = 0,
) -> GPT2LMHeadModel | LlamaForCausalLM | MixtralForCausalLM:
    """A freshly initialised `transformers` model of this shape, in training mode.

    device="meta" builds the structure with no memory behind the weights: a 70B model in a second,
    fine for counting parameters, useless for computing.
    """
    shape = as_shape(model)
    if seed is not None:
        torch.manual_seed(seed)  # the same weights every run, so results can be compared
    with torch.device(device):  # allocate each weight where it will live, never on the CPU first
        # Created in `dtype` directly: no fp32 copy first, and it works under FakeTensorMode.
        model = AutoModelForCausalLM.from_config(shape.config(attention), dtype=dtype)
    return model.train()


def model_shape(model: nn.Module) -> ModelShape:
    """The ModelShape of a built transformers GPT-2 or Llama model, read from its config: what
    build_model would need to build it again, and what the planners take."""
    c = getattr(model, "config", None)
    family = getattr(c, "model_type", "")
    if family == "gpt2":
        return ModelShape("gpt2", c.n_layer, c.n_embd, c.n_head, c.vocab_size, c.n_positions,
                          d_ff=c.n_inner or 0, tied_embeddings=c.tie_word_embeddings)
    if family in ("llama", "mixtral"):
        experts = dict(n_experts=c.num_local_experts, top_k=c.num_experts_per_tok) if (
            family == "mixtral") else {}
        return ModelShape("llama", c.num_hidden_layers, c.hidden_size, c.num_attention_heads,
                          c.vocab_size, c.max_position_embeddings, d_ff=c.intermediate_size,
                          n_kv_head=c.num_key_value_heads,
                          tied_embeddings=c.tie_word_embeddings, **experts)
    raise TypeError(f"no ModelShape for a {family or type(model).__name__!r} model: the course's "
                    "shapes are gpt2, llama and mixtral")


def enable_activation_checkpointing(model: nn.Module) -> None:
    """Keep only each block's input and recompute its activations during backward.

    transformers 5.2x names the switch `activation_checkpointing_enable`; earlier releases
    (5.17 on the course's GPU images, and 4.x) call it `gradient_checkpointing_enable`.
    """
    enable = getattr(model, "activation_checkpointing_enable", None)
    (enable or model.gradient_checkpointing_enable)()
