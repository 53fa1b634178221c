"""Inputs and outputs of the estimator. Pure data; the rules live in hfvram.engines (one folder per engine)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hfvram.spec import ModelSpec

if TYPE_CHECKING:
    from hfvram.engines.llamacpp.offload_plan import OffloadPlan
    from hfvram.estimate.host_memory import HostMemory

VERDICT_FITS = "fits"
VERDICT_TIGHT = "tight"
#: runs, with layers / experts (or, vLLM / SGLang --cpu-offload-gb, weights) kept in CPU RAM by the engine's own
#: placement: between tight and does not fit (README: exit codes)
VERDICT_OFFLOAD = "offload"
VERDICT_DOES_NOT_FIT = "does_not_fit"
#: best first: fits < tight < offload < does not fit
VERDICT_ORDER: tuple[str, ...] = (VERDICT_FITS, VERDICT_TIGHT, VERDICT_OFFLOAD, VERDICT_DOES_NOT_FIT)
FITS_THRESHOLD = 0.9  # contract: fits when total <= 0.9 x usable


def verdict_rank(verdict: object) -> int:
    """0 fits, 1 tight, 2 offload, 3 does not fit, 4 no verdict (or an unknown one)."""
    return VERDICT_ORDER.index(verdict) if isinstance(verdict, str) and verdict in VERDICT_ORDER else len(VERDICT_ORDER)


@dataclass(frozen=True)
class GPU:
    """One accelerator of the catalogue (hfvram/data/gpus.toml)."""

    id: str
    name: str
    vendor: str
    #: bytes the device exposes (nvidia-smi total where measured), not the marketing number
    memory_bytes: int
    memory_bandwidth_gbs: float | None = None
    bf16_tflops_dense: float | None = None
    #: the dense FP16 tensor peak at FP16 accumulate (gpus.toml fp16_acc16_tflops_dense, else fp16_tflops_dense):
    #: the rate the expected prefill scales (llama.cpp's quantized products run int8 tensor cores at twice it)
    fp16_tensor_tflops: float | None = None
    interconnect_gbs: float | None = None
    unified_memory: bool = False
    #: unified-memory parts: the GPU-addressable share of RAM (bytes); None for discrete GPUs
    addressable_bytes: int | None = None
    aliases: tuple[str, ...] = ()
    #: the total CUDA reports to a process (cudaMemGetInfo, torch.cuda.mem_get_info()[1]) as a published log
    #: showed it (gpus.toml cuda_total_gib); None = not observed
    cuda_total_bytes: int | None = None

    @property
    def gpu_memory_bytes(self) -> int:
        """What the GPU can address: the whole card, or the addressable share of unified memory."""
        return self.addressable_bytes if self.addressable_bytes is not None else self.memory_bytes

    @property
    def engine_visible_bytes(self) -> int:
        """The total an engine's ``torch.cuda.mem_get_info()`` sees (the budget vLLM takes a fraction of): the
        measured CUDA total where the catalogue has one, else :attr:`gpu_memory_bytes`."""
        if self.cuda_total_bytes is not None and self.addressable_bytes is None:
            return self.cuda_total_bytes
        return self.gpu_memory_bytes


@dataclass(frozen=True)
class Hardware:
    """``count`` GPUs of one kind, or a mixed set (``--gpu rtx4090+rtx3090``): ``devices`` holds every GPU in the
    order given (the device order the engine sees), and ``gpu`` / ``count`` are the card that sets the budget of an
    engine that needs equal shards (the one with the least memory; the slowest memory among the set) and the number
    of devices. A uniform set has no ``devices``; :attr:`gpus` lists the devices of either."""

    gpu: GPU
    count: int = 1
    devices: tuple[GPU, ...] = ()
    #: the host's memory system (``--host-memory``), for the speed of what an engine keeps in RAM; None = the
    #: default row of hfvram/data/host_memory.toml
    host: HostMemory | None = None
    #: the RAM there is (``--ram``); None = not given (the offload plan then does not check it)
    ram_bytes: int | None = None

    @property
    def gpus(self) -> tuple[GPU, ...]:
        """Every device of the set, in order."""
        return self.devices or (self.gpu,) * self.count

    @property
    def mixed(self) -> bool:
        return bool(self.devices)

    @property
    def total_gpu_memory_bytes(self) -> int:
        return sum(gpu.gpu_memory_bytes for gpu in self.gpus)

    @property
    def label(self) -> str:
        if self.devices:
            from hfvram.estimate.mixed import compact_label

            return compact_label(self.devices)
        return self.gpu.id if self.count == 1 else f"{self.gpu.id}x{self.count}"


@dataclass(frozen=True)
class Workload:
    #: tokens per sequence; None = the engine's own default (e.g. vLLM: the model's max length)
    context: int | None = None
    #: sequences held in the KV cache at full context
    concurrency: int = 1
    #: "auto" = the engine's rule; else bf16 / fp16 / fp8 / q8_0 / q4_0 / …
    kv_dtype: str = "auto"
    #: the longest length an engine's automatic length may pick (``--max-context-cap``; vLLM ``--max-model-len
    #: auto``); None = the model's own limit
    context_cap: int | None = None


@dataclass(frozen=True)
class DraftModel:
    """The speculative-decoding draft checkpoint the settings name (vLLM's ``--speculative-config '{"model": …}'``),
    read by the pipeline through the same sources as the model: its facts, or why they could not be read."""

    #: the draft as the settings name it (a Hub repo id or a path), capped
    name: str
    #: the draft's facts; None when it could not be read (``error`` says why)
    spec: ModelSpec | None = None
    #: where its facts came from ("hub meta-llama/Llama-3.2-1B@sha", "local /path", …)
    source: str | None = None
    #: why the draft could not be read (one line), None when it was
    error: str | None = None


@dataclass(frozen=True)
class ProjectorFile:
    """The multimodal projector GGUF a llama.cpp line names (``--mmproj FILE``), read by the pipeline from its
    header only: the bytes of its tensors, or why it could not be read (docs/engines/llamacpp.md#llamacpp-extra-models)."""

    #: the file as the line names it, capped
    name: str
    #: the sum of its tensors' bytes (ggml_nbytes of each tensor info); None when not read
    weight_bytes: int | None = None
    tensors: int = 0
    #: its ``general.architecture`` (``clip`` for llama.cpp's converter), capped
    arch: str | None = None
    #: why it could not be read (one line), None when it was
    error: str | None = None
    #: "file" (a local ``--mmproj FILE``), "hub" (``--mmproj NAME`` of the model's Hub repo) or "hub-auto" (the
    #: ``mmproj-*.gguf`` llama-server's ``-hf`` downloads with the model)
    origin: str = "file"
    #: the Hub repo it was read from (None for a local file)
    repo_id: str | None = None


@dataclass(frozen=True)
class EngineChoice:
    """What the user asked for: engine name, optional release, settings under the engine's own names."""

    name: str
    version: str | None = None
    settings: Mapping[str, str] = field(default_factory=dict)
    tp: int | None = None
    pp: int | None = None
    gpu_util: float | None = None
    #: the draft checkpoint the settings name, as read by the pipeline (None: none named, or not read)
    draft: DraftModel | None = None
    #: the ``--mmproj`` projector file of a llama.cpp line, as read by the pipeline (None: none named)
    projector: ProjectorFile | None = None


@dataclass(frozen=True)
class PerGpu:
    """The four terms on the worst GPU of the set, in bytes (contract: ``per_gpu``)."""

    weights: int
    kv_cache: int
    activations: int
    overhead: int
    #: what the engine may use on this GPU (after its memory fraction / reserve)
    usable: int
    #: the device's memory (or addressable share) on this GPU
    memory: int

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.activations + self.overhead

    @property
    def reserve(self) -> int:
        """Memory the engine holds back from itself (memory − usable)."""
        return max(0, self.memory - self.usable)


@dataclass(frozen=True)
class Capacity:
    #: KV-cache size in tokens the engine would report at start-up (vLLM "GPU KV cache size")
    kv_tokens: int | None = None
    #: full-length requests at workload.context that fit
    max_concurrency: float | None = None
    #: longest context that fits at workload.concurrency (the largest --context whose verdict is not
    #: does_not_fit, all else unchanged, never above the model's limit)
    max_context: int | None = None
    #: what the engine sizes the pool of ``kv_tokens`` by: "memory" (the budget's remainder), "context" (the
    #: context setting × slots) or "none" (a cache per request); the engine's engine.toml says which
    kv_pool_sized_by: str | None = None


@dataclass(frozen=True)
class SpeedPart:
    """One term of the expected time per token (docs/methodology.md, "Expected speed"): its name, the seconds it
    adds to every token, and how it was computed."""

    name: str
    seconds: float
    basis: str


@dataclass(frozen=True)
class ExpectedSpeed:
    """The expected decode speed (the sum of its parts) beside the bandwidth bound it refines, with the spread of
    measured / predicted over the published runs the constants were fitted on (``low`` .. ``high``: multiply the
    expectation by them for the range those runs cover)."""

    decode_tokens_per_second: float
    parts: tuple[SpeedPart, ...]
    decode_bound: float | None
    #: None: no published run sizes the spread (vLLM / SGLang --cpu-offload-gb, whose PCIe efficiency is assumed)
    low: float | None
    high: float | None
    #: host-resident weight bytes each ubatch copies to the GPU (llama.cpp op offload), for the expected prefill
    prefill_host_bytes: float = 0.0
    #: the expected prefill speed (hfvram.estimate.speed.expected_prefill); None where there is no basis
    prefill: ExpectedPrefill | None = None

    @property
    def seconds_per_token(self) -> float:
        return sum(part.seconds for part in self.parts)


@dataclass(frozen=True)
class ExpectedPrefill:
    """The expected prompt-processing speed of a ``prompt_tokens`` prompt in ubatches of ``ubatch`` (the sum of
    its named parts, seconds per prompt token), with the measured / predicted spread of the published runs its
    constants were fitted on (``low`` .. ``high``)."""

    tokens_per_second: float
    parts: tuple[SpeedPart, ...]
    prompt_tokens: int
    ubatch: int
    low: float | None
    high: float | None

    @property
    def seconds_per_token(self) -> float:
        return sum(part.seconds for part in self.parts)


@dataclass(frozen=True)
class Estimate:
    spec: ModelSpec
    hardware: Hardware | None
    #: resolved engine: name, version of the rules used, and every setting the estimate assumed
    engine: Mapping[str, object]
    #: resolved workload (context and kv_dtype filled in)
    workload: Workload
    per_gpu: PerGpu
    #: per_gpu.total / per_gpu.usable (None without hardware)
    utilization: float | None
    verdict: str | None
    capacity: Capacity
    decode_tokens_per_second: float | None
    warnings: tuple[str, ...] = ()
    #: term name -> one line on how it was computed (for --explain)
    explain: Mapping[str, str] = field(default_factory=dict)
    #: parallel layout used
    tp: int = 1
    pp: int = 1
    #: why the engine itself refuses this layout or hardware (an engine rule, not memory); None otherwise
    refusal: str | None = None
    #: a mixed set: the index in ``hardware.gpus`` of the device ``per_gpu`` describes (None: every device alike)
    worst_device: int | None = None
    #: KV cache bytes per token of context, per sequence, of the layers whose cache grows with context, for the
    #: K and the V halves at the KV types the engine resolved (whole model, before tensor parallelism)
    kv_k_bytes_per_token: int | None = None
    kv_v_bytes_per_token: int | None = None
    #: bytes per sequence that do not grow with context (sliding windows, recurrent state)
    kv_fixed_bytes_per_sequence: int | None = None
    #: the engine's own placement into CPU RAM when the model does not fit the GPUs whole (llama.cpp ``--fit``,
    #: Ollama's scheduler): layers per device, ``-ngl`` / ``-ot`` / ``-ts``, the RAM and the expected speed. Set
    #: with verdict ``offload`` (and ``does_not_fit`` when even that placement fails: ``offload.status`` ``none``)
    offload: OffloadPlan | None = None
    #: the expected decode speed and its parts (hfvram.estimate.speed); None where there is no basis
    speed: ExpectedSpeed | None = None

    @property
    def kv_bytes_per_token(self) -> int | None:
        if self.kv_k_bytes_per_token is None or self.kv_v_bytes_per_token is None:
            return None
        return self.kv_k_bytes_per_token + self.kv_v_bytes_per_token


def verdict_for(total: int, usable: int) -> str:
    if usable > 0 and total <= FITS_THRESHOLD * usable:
        return VERDICT_FITS
    if total <= usable:
        return VERDICT_TIGHT
    return VERDICT_DOES_NOT_FIT


@dataclass(frozen=True)
class ListedVerdict:
    """Does not fit, from the listing alone: ``weights`` (bytes the GPUs must hold at least) against ``memory``
    (every GPU of the set together): a scan's row answered from the Hub listing (hfvram/estimate/listed.py)."""

    weights: int
    memory: int
    #: the weights on the worst GPU at least (an even split over ``count`` GPUs)
    per_gpu_weights: int
    #: the memory of the GPU with the least
    per_gpu_memory: int
    count: int
