"""vLLM features that cost memory (docs/engines/vllm.md#vllm-features): LoRA adapter slots, speculative decoding,
CPU weight offload, prefix caching. Pure arithmetic on the spec and the settings; vllm.py reads the flags and
adds the terms to its breakdown.

- LoRA: ``LoRAModelManager`` wraps every linear layer (and the embeddings / lm_head the model class lists) at
  load time and allocates ``max_loras`` A/B slots of rank ``max_lora_rank`` per wrapped module, in the LoRA dtype
  (the model's by default), inside "Model loading took"; the profile run adds one float32 shrink buffer
  ``[slices, tokens, rank]`` per LoRA matmul.
- Speculative decoding: n-gram / suffix keep no model; an MTP draft runs the checkpoint's own MTP layers, whose
  attention caches in the same KV pool (one more layer per MTP layer); a draft model or EAGLE head is a second
  checkpoint the pipeline reads (``EngineChoice.draft``): its weights at the draft's TP, less what an EAGLE head
  shares with the target, and its own attention layers in the same KV pool; one it could not read is a warning.
- ``--cpu-offload-gb``: ``UVAOffloader`` moves whole parameters of the decoder layers to host memory until the
  budget is used; embeddings and lm_head stay on the GPU.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from hfvram.engines.vllm.constants import VllmConstants
from hfvram.errors import UsageError
from hfvram.estimate.common import GiB
from hfvram.estimate.types import DraftModel
from hfvram.spec import Layer, LayerKind, ModelSpec

#: layer kinds whose q/k/v/o projections vLLM builds as QKVParallelLinear + RowParallelLinear
_PLAIN_ATTENTION = (LayerKind.FULL, LayerKind.SLIDING, LayerKind.CHUNKED)
#: spec components the decoder layers hold (what the CPU offloader walks)
_LAYER_COMPONENTS = ("attention", "mlp", "experts", "router", "norms")


# ---------------------------------------------------------------------------------------------------------
# LoRA
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoraSettings:
    """``--enable-lora`` and its sizes under vLLM's names (LoRAConfig defaults when not set)."""

    max_loras: int
    max_lora_rank: int
    dtype_bytes: float
    fully_sharded_loras: bool = False
    max_cpu_loras: int | None = None
    #: lora_extra_vocab_size of releases before its removal (0 since; docs/engines/vllm.md#vllm-features)
    extra_vocab: int = 0


@dataclass(frozen=True)
class LoraTerm:
    """The LoRA buffers on the worst rank: the stacked A/B slots and the profile run's shrink buffer."""

    settings: LoraSettings
    #: stacked lora_a / lora_b bytes on one rank, allocated while the model loads
    bytes: int
    #: float32 shrink buffer of the widest LoRA matmul during the profile run
    activation: int
    #: (module, bytes on one rank) for --explain, largest first
    parts: tuple[tuple[str, int], ...]
    #: layer kinds / modules whose LoRA slots are not counted (named in a warning)
    unmodelled: tuple[str, ...]
    #: the warnings this term gives (unmodelled modules, vLLM's vocabulary limit)
    warnings: tuple[str, ...] = ()


def _column(loras: int, rank: int, in_size: int, out_slices: Iterable[int], tp: int, fully: bool) -> int:
    """Column-parallel (Merged/QKV) LoRA: per slice lora_a [loras, 1, rank (/tp fully sharded), in] and
    lora_b [loras, 1, out_slice per rank, rank]."""
    slices = list(out_slices)
    rank_a = rank // tp if fully else rank
    return loras * (len(slices) * rank_a * in_size + sum(slices) * rank)


def _row(loras: int, rank: int, in_per_rank: int, out_size: int, tp: int, fully: bool) -> int:
    """Row-parallel LoRA: lora_a [loras, 1, rank, in per rank], lora_b [loras, 1, out (/tp fully sharded), rank]."""
    return loras * (rank * in_per_rank + (out_size // tp if fully else out_size) * rank)


def _replicated(loras: int, rank: int, in_size: int, out_size: int) -> int:
    return loras * rank * (in_size + out_size)


def _attention_elems(layer: Layer, spec: ModelSpec, lora: LoraSettings, tp: int) -> int:
    heads, hidden = spec.num_attention_heads or 0, spec.hidden_size or 0
    q_shard = heads // tp * layer.head_dim_k
    # QKVParallelLinear keeps at least one KV head per rank (replicated when tp exceeds the KV heads)
    kv_heads = max(1, layer.num_kv_heads // tp)
    loras, rank, fully = lora.max_loras, lora.max_lora_rank, lora.fully_sharded_loras
    qkv = _column(loras, rank, hidden, (q_shard, kv_heads * layer.head_dim_k, kv_heads * layer.head_dim_v), tp, fully)
    o_proj = _row(loras, rank, heads // tp * layer.head_dim_v, hidden, tp, fully)
    return qkv + o_proj


def _mlp_elems(spec: ModelSpec, lora: LoraSettings, tp: int, gated: bool) -> int:
    hidden, inter = spec.hidden_size or 0, spec.intermediate_size or 0
    loras, rank, fully = lora.max_loras, lora.max_lora_rank, lora.fully_sharded_loras
    up = _column(loras, rank, hidden, (inter // tp,) * (2 if gated else 1), tp, fully)
    return up + _row(loras, rank, inter // tp, hidden, tp, fully)


def _moe_elems(spec: ModelSpec, lora: LoraSettings, tp: int, router: bool = True) -> int:
    """FusedMoEWithLoRA (2-D adapters): w1/w3 lora_a [loras, experts, rank, hidden] and lora_b [loras, experts,
    inter per rank, rank]; w2 lora_a [loras, experts, rank, inter per rank], lora_b [loras, experts, hidden, rank];
    the router (a ReplicatedLinear) gets [rank, hidden] + [experts, rank]."""
    hidden, experts = spec.hidden_size or 0, spec.num_experts or 0
    inter = (spec.moe_intermediate_size or spec.intermediate_size or 0) // tp
    loras, rank = lora.max_loras, lora.max_lora_rank
    rank_a = rank // tp if lora.fully_sharded_loras else rank
    hidden_b = hidden // tp if lora.fully_sharded_loras else hidden
    w13 = 2 * loras * experts * (rank_a * hidden + inter * rank)
    w2 = loras * experts * (rank * inter + hidden_b * rank)
    return w13 + w2 + (_replicated(loras, rank, hidden, experts) if router else 0)


def lora_term(
    spec: ModelSpec,
    lora: LoraSettings,
    tp: int,
    layers: tuple[Layer, ...],
    batched_tokens: int,
    constants: VllmConstants | None,
    engine: str = "vllm",
) -> LoraTerm:
    """The LoRA slots allocated on the worst rank for ``layers`` (that rank's stage), in bytes
    (docs/engines/vllm.md#vllm-features). ``engine="sglang"``: SGLang's ``LoRAMemoryPool`` for
    ``--lora-target-modules all`` (docs/engines/sglang.md#sglang-features): the same layer shapes, embed_tokens and
    lm_head always, lm_head's lora_b split over TP, no router slots (``constants`` None: none of vLLM's lists)."""
    tp = max(1, tp)
    architecture = spec.architecture or ""
    sglang = engine == "sglang"
    gated = (spec.model_type or "") not in (constants.lora_ungated_model_types if constants else ())
    attention = mlp = experts = 0
    unmodelled: dict[str, int] = {}
    for layer in layers:
        if layer.kind in _PLAIN_ATTENTION and layer.num_kv_heads:
            attention += _attention_elems(layer, spec, lora, tp)
        elif layer.kind is not LayerKind.NONE:
            unmodelled[layer.kind.value] = unmodelled.get(layer.kind.value, 0) + 1
        if layer.moe and spec.num_experts:
            experts += _moe_elems(spec, lora, tp, router=not sglang)
        elif spec.intermediate_size:
            mlp += _mlp_elems(spec, lora, tp, gated)
    vocab, hidden = spec.vocab_size or 0, spec.hidden_size or 0
    loras, rank = lora.max_loras, lora.max_lora_rank
    # VocabParallelEmbeddingWithLoRA: lora_a [loras, vocab, rank] and lora_b [loras, 1, hidden, rank], whole on
    # every rank; LogitsProcessorWithLoRA: lora_a [loras, 1, rank, hidden], lora_b [loras, 1, vocab, rank]
    inputs = sglang or architecture in (constants.lora_input_embedding_architectures if constants else ())
    outputs = sglang or architecture in (constants.lora_output_embedding_architectures if constants else ())
    extra = 0 if sglang else lora.extra_vocab
    embed = loras * rank * (vocab + extra + hidden) if inputs else 0
    head_rows = -(-vocab // tp) if sglang else vocab
    if extra and outputs and constants is not None:
        # LogitsProcessorWithLoRA pads lora_b to lora_vocab_padding_size (256) over vocab + extra
        head_rows = _pad(vocab + extra, constants.lora_vocab_padding_size)
    head = loras * rank * (hidden + head_rows) if outputs else 0
    extra_bytes = _extra_vocab_bytes(spec, lora, tp, constants, inputs, outputs) if extra and constants else 0
    per_elem = lora.dtype_bytes
    parts = {
        "attention": int(attention * per_elem),
        "mlp": int(mlp * per_elem),
        "experts + router": int(experts * per_elem),
        "embed_tokens": int(embed * per_elem),
        "lm_head": int(head * per_elem),
        "extra vocabulary": extra_bytes,
    }
    names = [f"{count} {kind} layer(s)" for kind, count in unmodelled.items()]
    if spec.num_shared_experts and any(layer.moe for layer in layers):
        names.append("the shared experts")
    # the widest LoRA matmul of the profile run: [slices, tokens, rank] in float32 (punica add_lora_linear)
    slices = 3 if attention else (2 if gated else 1)
    activation = int(slices * batched_tokens * rank * float(constants.lora_buffer_bytes_per_elem if constants else 0))
    kept = tuple(sorted(((name, size) for name, size in parts.items() if size), key=lambda item: -item[1]))
    term = LoraTerm(lora, sum(parts.values()), activation if kept else 0, kept, tuple(names))
    return replace(term, warnings=tuple(lora_warnings(term, spec, constants)))


def _pad(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _extra_vocab_bytes(
    spec: ModelSpec, lora: LoraSettings, tp: int, constants: VllmConstants, inputs: bool, outputs: bool
) -> int:
    """What ``lora_extra_vocab_size`` (E) added before its removal: the Llama-style classes grow embed_tokens by
    E × max_loras rows (padded to 64) and lm_head by E rows with its vocabulary padded to 256 instead of 64, both
    split over TP; each wrapper keeps ``embeddings_tensors`` [max_loras, E, hidden] in the model dtype."""
    vocab, hidden, extra = spec.vocab_size or 0, spec.hidden_size or 0, lora.extra_vocab
    base_pad, lora_pad = constants.vocab_padding, constants.lora_vocab_padding_size
    rows = 0.0
    if inputs:
        rows += _pad(extra * lora.max_loras, base_pad) / tp + lora.max_loras * extra
    if outputs:
        grown = _pad(vocab, lora_pad) + _pad(extra, lora_pad) - _pad(vocab, base_pad)
        rows += (0 if spec.tie_word_embeddings else grown / tp) + lora.max_loras * extra
    return int(rows * hidden * lora.dtype_bytes)


def explain_lora(term: LoraTerm) -> str:
    lora = term.settings
    shown = ", ".join(f"{name} {size / GiB:.3f} GiB" for name, size in term.parts)
    return (
        f"LoRA: {lora.max_loras} slot(s) of rank {lora.max_lora_rank} at {lora.dtype_bytes:g} B "
        f"({'fully sharded' if lora.fully_sharded_loras else 'lora_b split as the layer'}) = "
        f"{term.bytes / GiB:.3f} GiB ({shown or 'no module wrapped'}), allocated with the weights; "
        f"profile-run shrink buffer {term.activation / GiB:.3f} GiB"
        + (
            f"; {lora.max_cpu_loras} adapter(s) cached in host memory (--max-cpu-loras, no GPU memory)"
            if lora.max_cpu_loras
            else ""
        )
        + " (docs/engines/vllm.md#vllm-features)"
    )


def lora_warnings(term: LoraTerm, spec: ModelSpec, constants: VllmConstants | None) -> list[str]:
    notes = []
    if term.unmodelled:
        notes.append(
            f"--enable-lora: the LoRA slots of {', '.join(term.unmodelled)} are not counted (hfvram sizes vLLM's "
            "LoRA buffers for plain attention, dense MLP and fused-MoE layers only)"
        )
    limit = int(constants.lora_max_vocab if constants else 0)
    if limit and (spec.vocab_size or 0) > limit:
        notes.append(f"--enable-lora: vLLM refuses LoRA on a vocabulary above {limit} (this one: {spec.vocab_size})")
    return notes


# ---------------------------------------------------------------------------------------------------------
# Speculative decoding
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Speculative:
    """What ``--speculative-config`` (or the old ``--speculative-model``) asks for, as vLLM resolves it."""

    #: vLLM's method after its own resolution: "ngram", "suffix", "mtp", "eagle", "eagle3", "draft_model", …
    method: str
    model: str | None
    num_speculative_tokens: int | None
    #: MTP layers whose KV the pool holds (0 unless method is mtp)
    draft_kv_layers: int = 0
    #: the draft checkpoint as the pipeline read it (draft_model / eagle / eagle3 only; None otherwise)
    draft: DraftModel | None = None
    #: the draft's tensor-parallel size (vLLM ``_verify_and_get_draft_tp``: the target's unless set to 1)
    draft_tp: int = 1
    #: components of the draft checkpoint vLLM does not keep: it shares the target's (EAGLE without its own)
    shared: tuple[str, ...] = ()

    @property
    def draft_spec(self) -> ModelSpec | None:
        """The draft's facts when it was read and its method is one hfvram sizes."""
        return self.draft.spec if self.draft is not None else None


def names_custom_class(model: str | None) -> bool:
    """vLLM: a model with a dot, no slash and no URL scheme names a proposer class (``custom_class``)."""
    return bool(model) and "." in str(model) and "/" not in str(model) and not str(model).startswith("file://")


def resolve_speculative(
    method: str | None,
    model: str | None,
    tokens: int | None,
    spec: ModelSpec,
    constants: VllmConstants,
    draft: DraftModel | None = None,
    draft_tp: int | None = None,
    tp: int = 1,
):
    """vLLM's ``SpeculativeConfig.__post_init__`` method resolution: a model naming a class is custom_class, no
    method with model "ngram" is n-gram, no method otherwise a draft model; a named MTP type becomes "mtp"; a draft
    checkpoint whose name holds "eagle-" / "eagle3" is eagle / eagle3, one whose config's model_type is medusa /
    mlp_speculator / an MTP type is that method; the draft's TP is the target's unless set (1 or the target's
    only, and equal for draft_model) (docs/engines/vllm.md#vllm-features)."""
    if method is None and model is None and tokens is None:
        return None
    if names_custom_class(model):
        method = "custom_class"
    elif method is None:
        method = "ngram" if model in ("ngram", "[ngram]") else "draft_model"
    if method == "[ngram]":
        method = "ngram"
    if method in constants.speculative_mtp_methods:
        method = "mtp"
    layers = spec.num_mtp_layers if method == "mtp" else 0
    if method not in constants.speculative_draft_methods or not model:
        return Speculative(method, model, tokens, draft_kv_layers=layers)
    lowered = model.lower()
    if method not in ("eagle", "eagle3"):
        if "eagle-" in lowered:
            method = "eagle"
        elif "eagle3" in lowered:
            method = "eagle3"
        elif draft is not None and draft.spec is not None and draft.spec.model_type in ("medusa", "mlp_speculator"):
            method = str(draft.spec.model_type)
    sized_tp = _draft_tp(method, draft_tp, tp)
    shared = shared_components(method, draft.spec if draft else None, constants)
    return Speculative(method, model, tokens, draft=draft, draft_tp=sized_tp, shared=shared)


def _draft_tp(method: str, asked: int | None, tp: int) -> int:
    """vLLM ``_verify_and_get_draft_tp`` (and ``DraftModelProposer``'s check): unset = the target's TP; set, 1 or
    the target's; a draft model needs the target's."""
    if asked is None:
        return tp
    if asked not in (1, tp):
        raise UsageError(
            f"draft_tensor_parallel_size {asked}: vLLM takes 1 or the target's tensor_parallel_size ({tp})"
        )
    if method == "draft_model" and asked != tp:
        raise UsageError(
            f"draft_tensor_parallel_size {asked}: vLLM runs a draft model only at the target's "
            f"tensor_parallel_size ({tp})"
        )
    return asked


def shared_components(method: str, draft: ModelSpec | None, constants: VllmConstants) -> tuple[str, ...]:
    """Weight components of an EAGLE head vLLM takes from the target instead of keeping its own: embed_tokens
    and lm_head when the checkpoint holds no such tensor (``has_own_embed_tokens`` / ``has_own_lm_head`` stay
    False; the head's own allocation is deleted after loading, before "Model loading took" is measured). The
    header-summed weights already leave them out; this names them. Only known from tensor headers: a head sized
    from its config shapes shares nothing here (its tensors are not known)."""
    if draft is None or draft.weights is None or not draft.weights.exact:
        return ()
    if method not in constants.speculative_shared_embedding_methods:
        return ()
    held = draft.weights.bytes_by_component
    return tuple(name for name in ("embeddings", "lm_head") if not held.get(name))


def draft_kv_layers(speculative: Speculative | None, tp: int) -> tuple[Layer, ...]:
    """The draft's attention layers as the target's TP rank holds them: the draft's own geometry (KV heads, head
    dims, windows); at draft TP 1 under a larger target TP every rank holds the draft's whole KV heads."""
    draft = speculative.draft_spec if speculative is not None else None
    if draft is None:
        return ()
    layers = tuple(layer for layer in draft.layers if layer.kind is not LayerKind.NONE)
    if speculative is not None and speculative.draft_tp != tp and tp > 1:
        layers = tuple(
            replace(layer, num_kv_heads=layer.num_kv_heads * tp) if layer.num_kv_heads else layer for layer in layers
        )
    return layers


@functools.lru_cache(maxsize=64)
def _with_layers(layers: tuple[Layer, ...], count: int) -> tuple[Layer, ...]:
    """``layers`` and ``count`` copies of its last full-attention (or MLA) layer: the MTP layers' attention."""
    attention = [layer for layer in layers if layer.kind in (LayerKind.FULL, LayerKind.MLA)]
    if not attention or count <= 0:
        return layers
    return (*layers, *(attention[-1],) * count)


@functools.lru_cache(maxsize=64)
def _with_draft(layers: tuple[Layer, ...], draft: tuple[Layer, ...]) -> tuple[Layer, ...]:
    return (*layers, *draft)


def spec_with_draft_layers(spec: ModelSpec, speculative: Speculative | None, tp: int = 1) -> ModelSpec:
    """The spec whose layers include the draft's: vLLM's ``get_kv_cache_spec`` walks every attention layer of
    the static forward context, the drafter's too (MTP layers, a draft model's or EAGLE head's layers), so they
    share the one KV pool."""
    if speculative is None:
        return spec
    if speculative.draft_kv_layers:
        layers = _with_layers(spec.layers, speculative.draft_kv_layers)
    else:
        extra = draft_kv_layers(speculative, tp)
        if not extra:
            return spec
        layers = _with_draft(spec.layers, extra)
    return spec if layers is spec.layers else replace(spec, layers=layers, num_layers=len(layers))


def speculative_warnings(speculative: Speculative | None, constants: VllmConstants) -> list[str]:
    """A note that n-gram / suffix drafting costs nothing and that MTP is counted; for a draft model or EAGLE head
    what is counted of the checkpoint read, or a warning naming one hfvram could not read."""
    if speculative is None:
        return []
    method = speculative.method
    tokens = f", {speculative.num_speculative_tokens} tokens" if speculative.num_speculative_tokens else ""
    if method in constants.speculative_free_methods:
        return [f"speculative decoding ({method}{tokens}) drafts from the tokens already seen: no GPU memory"]
    if method == "mtp":
        if not speculative.draft_kv_layers:
            return []  # speculative_refusal: vLLM does not start
        return [
            f"speculative decoding (mtp{tokens}): its {speculative.draft_kv_layers} MTP layer(s) are counted in the "
            "weights and the KV pool; the drafter's own profile-run activations and CUDA graphs are not"
        ]
    draft = f" {speculative.model[:120]}" if speculative.model else ""
    read = speculative.draft
    if read is not None and read.spec is not None and method in constants.speculative_draft_methods:
        return [
            f"speculative decoding ({method}{tokens}): the draft{draft}'s weights (TP {speculative.draft_tp}) and its "
            f"{sum(1 for layer in draft_kv_layers(speculative, 1) if layer.kv_elems_per_token)} attention layer(s) in "
            "the KV pool are counted; its own "
            "profile-run activations, input buffers and CUDA graphs are not"
        ]
    if read is not None and read.spec is not None:
        return [
            f"speculative decoding ({method}{tokens}): hfvram does not size a {method} draft{draft}: its weights, its "
            "KV cache and its activations are not counted"
        ]
    why = f" ({read.error[:160]})" if read is not None and read.error else ""
    return [
        f"speculative decoding ({method}{tokens}): the draft{draft} is a second checkpoint hfvram has not read{why}: "
        "its weights, its KV cache (its layers share the pool) and its activations are not counted"
    ]


def speculative_refusal(speculative: Speculative | None, spec: ModelSpec, constants: VllmConstants) -> str | None:
    """The speculative-decoding setups vLLM refuses at start-up, as the verdict (docs/engines/vllm.md#vllm-features):
    an MTP draft on a model whose config states no multi-token-prediction layers (``SpeculativeConfig``'s
    ``hf_config_override`` gives such a model no ``n_predict``, and ``__post_init__`` refuses MTP without one), and a
    draft model whose vocabulary is not the target's (``verify_equal_vocab_size_if_draft_model``)."""
    if speculative is None:
        return None
    tokens = f", {speculative.num_speculative_tokens} tokens" if speculative.num_speculative_tokens else ""
    if speculative.method == "mtp" and not speculative.draft_kv_layers:
        return (
            f"vLLM refuses speculative decoding (mtp{tokens}): the model's config states no multi-token-prediction "
            "layers to draft with (docs/engines/vllm.md#vllm-features)"
        )
    draft = speculative.draft_spec
    if (
        speculative.method == "draft_model"
        and draft is not None
        and draft.vocab_size
        and spec.vocab_size
        and draft.vocab_size != spec.vocab_size
    ):
        return (
            f"vLLM refuses the draft model: its vocabulary ({draft.vocab_size}) is not the target's "
            f"({spec.vocab_size}) (verify_equal_vocab_size_if_draft_model, docs/engines/vllm.md#vllm-features)"
        )
    return None


def draft_warnings(speculative: Speculative | None, spec: ModelSpec, pp: int, constants: VllmConstants) -> list[str]:
    """What a read draft's figures leave open: vLLM refuses a draft model whose vocabulary is not the target's
    (``verify_equal_vocab_size_if_draft_model``); an EAGLE head's embed_tokens / lm_head that its checkpoint holds
    are shared when they equal the target's (vLLM compares the tensors; hfvram counts them), and ones sized from
    config shapes are counted whole; with pipeline parallelism the whole draft sits on the last stage."""
    draft = speculative.draft_spec if speculative is not None else None
    if draft is None or speculative is None or speculative.method not in constants.speculative_draft_methods:
        return []
    notes = []
    method = speculative.method
    if method in constants.speculative_shared_embedding_methods and draft.weights is not None:
        if not draft.weights.exact:
            notes.append(
                f"speculative decoding ({method}): the head's weights are sized from its config shapes, embed_tokens "
                "and lm_head included; vLLM takes the target's when the checkpoint has none (its tensor headers "
                "would say)"
            )
        else:
            held = [name for name in ("embeddings", "lm_head") if draft.weights.bytes_by_component.get(name)]
            if held:
                notes.append(
                    f"speculative decoding ({method}): the head's own {' and '.join(held)} are counted; vLLM shares "
                    "the target's instead when the tensors are equal (it compares them while loading)"
                )
    if pp > 1:
        notes.append(
            "speculative decoding with pipeline parallelism: vLLM puts the whole draft on the last stage; hfvram adds "
            "its weights to the worst stage and its layers to that stage's pool (an approximation)"
        )
    return notes


@dataclass(frozen=True)
class DraftTerm:
    """The draft checkpoint's share of the worst rank: its weights (in "Model loading took") and its KV."""

    name: str
    method: str
    tp: int
    #: the draft's weights on one rank, less what it shares with the target
    weights: int
    #: components taken from the target (not loaded twice)
    shared: tuple[str, ...]
    #: the draft's attention layers in the KV pool, and their K+V bytes per token on one rank
    kv_layers: int
    kv_bytes_per_token: float
    #: the same for the whole draft (before tensor parallelism), at the KV type the engine resolved
    kv_bytes_per_token_whole: float
    #: where the draft's facts came from, and how its weights were sized
    source: str
    weights_explain: str

    def as_dict(self) -> dict[str, object]:
        return {
            "model": self.name,
            "method": self.method,
            "tensor_parallel_size": self.tp,
            "weights_bytes": self.weights,
            "shared_with_target": list(self.shared),
            "kv_layers": self.kv_layers,
            "kv_bytes_per_token": round(self.kv_bytes_per_token_whole),
            "kv_bytes_per_token_per_gpu": round(self.kv_bytes_per_token),
            "source": self.source,
        }


def explain_speculative(speculative: Speculative | None, term: DraftTerm | None = None) -> str | None:
    if term is not None:
        shared = f"; {' and '.join(term.shared)} shared with the target (not loaded twice)" if term.shared else ""
        return (
            f"speculative decoding ({term.method}): draft {term.name} ({term.source}) loaded at TP {term.tp} with the "
            f"target, {term.weights / GiB:.3f} GiB per GPU ({term.weights_explain}){shared}; its {term.kv_layers} "
            f"attention layer(s) cache in the same KV pool, {term.kv_bytes_per_token:g} B per token per GPU "
            "(docs/engines/vllm.md#vllm-features)"
        )
    if speculative is None or not speculative.draft_kv_layers:
        return None
    return (
        f"speculative decoding (mtp): the checkpoint's {speculative.draft_kv_layers} MTP layer(s) are loaded with "
        "the weights and cache in the same KV pool (one more attention layer each per token; "
        "docs/engines/vllm.md#vllm-features)"
    )


# ---------------------------------------------------------------------------------------------------------
# CPU weight offload
# ---------------------------------------------------------------------------------------------------------


def offloaded_bytes(by_component: Mapping[str, int], pp: int, cpu_offload_gb: float) -> tuple[int, int]:
    """(bytes moved to host memory, bytes the offloader could move): ``UVAOffloader`` walks the decoder layers'
    parameters and moves whole parameters until ``cpu_offload_gb`` GiB are moved (it checks before each
    parameter, so it may pass the budget by one parameter); embeddings, lm_head and the final norm stay."""
    layers = sum(by_component.get(name, 0) for name in _LAYER_COMPONENTS) // max(1, pp)
    return min(layers, int(cpu_offload_gb * GiB)), layers
