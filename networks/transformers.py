"""Transformer parameter shapes: the gradients data-parallel jobs exchange today.

One table (``CONFIGS``) holds each model's published configuration; four small functions turn a
configuration into the ordered ``(name, shape)`` list of its HuggingFace PyTorch model, with
HuggingFace's parameter names and shapes as torch stores them (``nn.Linear`` weights are
``[out, in]``; GPT-2's ``Conv1D`` weights are ``[in, out]``). Unlike the MXNet image networks, where
only arrays named ``*weight*``/``*bias*`` are kept, here *every* trainable parameter is listed,
since all of them are exchanged: LayerNorm/RMSNorm weights, and ViT's ``cls_token`` and
``position_embeddings``. Tied weights (GPT-2's LM head, the small Llamas' ``lm_head``) appear once.

* ``bert-*``: ``BertModel`` with its pooler.
* ``gpt2*``: ``GPT2Model`` (the LM head is tied to ``wte``).
* ``llama-*``: ``LlamaForCausalLM`` (Llama 3.2 1B/3B tie ``lm_head``; Llama 3.1 8B does not).
* ``vit-*``: ``ViTForImageClassification``; the image size sets the number of 16x16 patches and
  so the position-embedding length, ``num_classes`` sets the classifier.

The language models ignore ``image_shape`` and ``num_classes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

Shape = tuple[int, ...]
Shapes = list[tuple[str, Shape]]


@dataclass(frozen=True)
class Config:
    family: str          # "bert", "gpt2", "llama" or "vit"
    hidden: int
    layers: int
    intermediate: int    # MLP width
    vocab: int = 0
    positions: int = 0   # learned position embeddings (BERT, GPT-2)
    heads: int = 0       # attention heads (Llama: query heads)
    kv_heads: int = 0    # Llama's grouped key/value heads
    tied: bool = True    # Llama: lm_head shares the embedding
    summary: str = ""


CONFIGS: dict[str, Config] = {
    "bert-base": Config("bert", 768, 12, 3072, vocab=30522, positions=512,
                        summary="BERT-base, 110M (HF BertModel + pooler)"),
    "bert-large": Config("bert", 1024, 24, 4096, vocab=30522, positions=512,
                         summary="BERT-large, 335M (HF BertModel + pooler)"),
    "gpt2": Config("gpt2", 768, 12, 3072, vocab=50257, positions=1024,
                   summary="GPT-2 small, 124M (HF GPT2Model)"),
    "gpt2-medium": Config("gpt2", 1024, 24, 4096, vocab=50257, positions=1024,
                          summary="GPT-2 medium, 355M (HF GPT2Model)"),
    "gpt2-large": Config("gpt2", 1280, 36, 5120, vocab=50257, positions=1024,
                         summary="GPT-2 large, 774M (HF GPT2Model)"),
    "gpt2-xl": Config("gpt2", 1600, 48, 6400, vocab=50257, positions=1024,
                      summary="GPT-2 XL, 1.5B (HF GPT2Model)"),
    "llama-1b": Config("llama", 2048, 16, 8192, vocab=128256, heads=32, kv_heads=8,
                       summary="Llama 3.2 1B, 1.24B (HF LlamaForCausalLM, tied head)"),
    "llama-3b": Config("llama", 3072, 28, 8192, vocab=128256, heads=24, kv_heads=8,
                       summary="Llama 3.2 3B, 3.2B (HF LlamaForCausalLM, tied head)"),
    "llama-8b": Config("llama", 4096, 32, 14336, vocab=128256, heads=32, kv_heads=8, tied=False,
                       summary="Llama 3.1 8B, 8.0B (HF LlamaForCausalLM)"),
    "vit-b16": Config("vit", 768, 12, 3072,
                      summary="ViT-B/16, 86M at 224x224 (HF ViTForImageClassification)"),
    "vit-l16": Config("vit", 1024, 24, 4096,
                      summary="ViT-L/16, 304M at 224x224 (HF ViTForImageClassification)"),
}

PATCH = 16  # ViT patch size


def linear(name: str, out_features: int, in_features: int) -> Shapes:
    return [(f"{name}.weight", (out_features, in_features)), (f"{name}.bias", (out_features,))]


def layer_norm(name: str, width: int) -> Shapes:
    return [(f"{name}.weight", (width,)), (f"{name}.bias", (width,))]


def bert(c: Config) -> Shapes:
    d = c.hidden
    result: Shapes = [("embeddings.word_embeddings.weight", (c.vocab, d)),
                      ("embeddings.position_embeddings.weight", (c.positions, d)),
                      ("embeddings.token_type_embeddings.weight", (2, d)),
                      *layer_norm("embeddings.LayerNorm", d)]
    for i in range(c.layers):
        p = f"encoder.layer.{i}"
        result += (linear(f"{p}.attention.self.query", d, d)
                   + linear(f"{p}.attention.self.key", d, d)
                   + linear(f"{p}.attention.self.value", d, d)
                   + linear(f"{p}.attention.output.dense", d, d)
                   + layer_norm(f"{p}.attention.output.LayerNorm", d)
                   + linear(f"{p}.intermediate.dense", c.intermediate, d)
                   + linear(f"{p}.output.dense", d, c.intermediate)
                   + layer_norm(f"{p}.output.LayerNorm", d))
    return result + linear("pooler.dense", d, d)


def gpt2(c: Config) -> Shapes:
    d = c.hidden

    def conv1d(name: str, in_features: int, out_features: int) -> Shapes:
        return [(f"{name}.weight", (in_features, out_features)), (f"{name}.bias", (out_features,))]

    result: Shapes = [("wte.weight", (c.vocab, d)), ("wpe.weight", (c.positions, d))]
    for i in range(c.layers):
        p = f"h.{i}"
        result += (layer_norm(f"{p}.ln_1", d) + conv1d(f"{p}.attn.c_attn", d, 3 * d)
                   + conv1d(f"{p}.attn.c_proj", d, d) + layer_norm(f"{p}.ln_2", d)
                   + conv1d(f"{p}.mlp.c_fc", d, c.intermediate)
                   + conv1d(f"{p}.mlp.c_proj", c.intermediate, d))
    return result + layer_norm("ln_f", d)


def llama(c: Config) -> Shapes:
    d, head_dim = c.hidden, c.hidden // c.heads
    q, kv = c.heads * head_dim, c.kv_heads * head_dim
    result: Shapes = [("model.embed_tokens.weight", (c.vocab, d))]
    for i in range(c.layers):
        p = f"model.layers.{i}"
        result += [(f"{p}.self_attn.q_proj.weight", (q, d)),
                   (f"{p}.self_attn.k_proj.weight", (kv, d)),
                   (f"{p}.self_attn.v_proj.weight", (kv, d)),
                   (f"{p}.self_attn.o_proj.weight", (d, q)),
                   (f"{p}.mlp.gate_proj.weight", (c.intermediate, d)),
                   (f"{p}.mlp.up_proj.weight", (c.intermediate, d)),
                   (f"{p}.mlp.down_proj.weight", (d, c.intermediate)),
                   (f"{p}.input_layernorm.weight", (d,)),
                   (f"{p}.post_attention_layernorm.weight", (d,))]
    result.append(("model.norm.weight", (d,)))
    return result if c.tied else result + [("lm_head.weight", (c.vocab, d))]


def vit(c: Config, image_shape: Shape, num_classes: int) -> Shapes:
    channels, height, width = image_shape
    if height % PATCH or width % PATCH:
        raise ValueError(f"ViT needs an image height and width divisible by its {PATCH}-pixel "
                         f"patch, got {height}x{width} (e.g. use 3,224,224)")
    d = c.hidden
    patches = (height // PATCH) * (width // PATCH)
    result: Shapes = [("vit.embeddings.cls_token", (1, 1, d)),
                      ("vit.embeddings.position_embeddings", (1, 1 + patches, d)),
                      ("vit.embeddings.patch_embeddings.projection.weight",
                       (d, channels, PATCH, PATCH)),
                      ("vit.embeddings.patch_embeddings.projection.bias", (d,))]
    for i in range(c.layers):
        p = f"vit.encoder.layer.{i}"
        result += (linear(f"{p}.attention.attention.query", d, d)
                   + linear(f"{p}.attention.attention.key", d, d)
                   + linear(f"{p}.attention.attention.value", d, d)
                   + linear(f"{p}.attention.output.dense", d, d)
                   + linear(f"{p}.intermediate.dense", c.intermediate, d)
                   + linear(f"{p}.output.dense", d, c.intermediate)
                   + layer_norm(f"{p}.layernorm_before", d) + layer_norm(f"{p}.layernorm_after", d))
    return result + layer_norm("vit.layernorm", d) + linear("classifier", num_classes, d)


FAMILIES: dict[str, Callable[[Config], Shapes]] = {"bert": bert, "gpt2": gpt2, "llama": llama}


def _builder(name: str) -> Callable[..., Shapes]:
    config = CONFIGS[name]

    def build(image_shape: Shape = (3, 224, 224), num_classes: int = 1000) -> Shapes:
        if config.family == "vit":
            return vit(config, image_shape, num_classes)
        return FAMILIES[config.family](config)

    build.__name__ = build.__qualname__ = f"shapes_{name.replace('-', '_')}"
    build.__doc__ = f"Parameter shapes of {config.summary}."
    return build


MODELS: dict[str, tuple[Callable[..., Shapes], str]] = {
    name: (_builder(name), config.summary) for name, config in CONFIGS.items()
}


DEFAULT_SEQ_LEN = 2048     # tokens per sample of the models without learned positions (Llama)


def seq_len_of(name: str, image_shape: Shape, seq_len: int | None) -> int:
    """Tokens per sample: ViT's patches + its class token (the image sets them); the language
    models ``seq_len``, by default their learned positions (BERT 512, GPT-2 1024) or 2048."""
    c = CONFIGS[name]
    if c.family == "vit":
        return (image_shape[1] // PATCH) * (image_shape[2] // PATCH) + 1
    return seq_len or c.positions or DEFAULT_SEQ_LEN


def token_uses(name: str, image_shape: Shape, seq_len: int | None
               ) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """What networks.costs needs of model ``name``, per sample: (positions, outputs, extra).

    positions: how many tokens each array is applied to (0: a lookup table, no arithmetic; the
    pooler and ViT's classifier read one token; a tied embedding is also the LM head, applied to
    every token). outputs: output features of GPT-2's ``Conv1D`` weights, stored ``[in, out]``
    (every other weight is ``[out, in]``). extra: the attention's score and context products,
    2 x 2 x S x S x width multiply-adds per layer, put on the layer of its query projection.
    """
    c = CONFIGS[name]
    tokens = seq_len_of(name, image_shape, seq_len)
    arrays = _builder(name)(image_shape=image_shape, num_classes=1)
    positions = {array: tokens for array, _ in arrays}
    for array, _ in arrays:
        if array.endswith(("embeddings.weight", "wte.weight", "wpe.weight", "cls_token",
                           "position_embeddings", "embed_tokens.weight")):
            positions[array] = 0
        if array.startswith(("pooler.", "classifier.")):
            positions[array] = 1
    if c.family == "llama" and c.tied:
        positions["model.embed_tokens.weight"] = tokens
    if c.family == "vit":
        positions["vit.embeddings.patch_embeddings.projection.weight"] = tokens - 1
        positions["vit.embeddings.patch_embeddings.projection.bias"] = tokens - 1
    outputs = {array: shape[1] for array, shape in arrays
               if c.family == "gpt2" and len(shape) == 2 and array.startswith("h.")}
    width = c.hidden
    query = {"bert": "attention.self.query.weight", "gpt2": "attn.c_attn.weight",
             "llama": "self_attn.q_proj.weight", "vit": "attention.attention.query.weight"}
    extra = {array: 4 * tokens * tokens * width for array, _ in arrays
             if array.endswith(query[c.family])}
    return positions, outputs, extra
