"""llama.cpp's KV cache and recurrent state, exact (docs/engines/llamacpp.md#llamacpp-kv-cache,
#llamacpp-recurrent-state)."""

from __future__ import annotations

from dataclasses import dataclass

from hfvram.engines.llamacpp.settings import Settings, pad_cells, row_size
from hfvram.estimate.common import layer_kv_row_elems as common_kv_row_elems
from hfvram.spec import RECURRENT_KINDS, WINDOWED_KINDS, Layer, LayerKind, ModelSpec

# ---------------------------------------------------------------------------------------------------------
# KV cache and recurrent state (exact, llamacpp.md#llamacpp-kv-cache, llamacpp.md#llamacpp-recurrent-state)
# ---------------------------------------------------------------------------------------------------------


def swa_cells(window: int, settings: Settings, pad: int = 256) -> int:
    """Cells of a sliding-window layer's cache per stream: ``pad256(min(n_ctx_seq, n_swa × (unified ? n_seq_max
    : 1) + n_ubatch))``, or the full n_ctx_seq with ``swa_full`` (llama-kv-cache-iswa.cpp)."""
    if settings.swa_full:
        return settings.n_ctx_seq
    seqs = settings.n_seq_max if settings.kv_unified else 1
    return min(settings.n_ctx_seq, pad_cells(window * seqs + settings.n_ubatch, pad))


def layer_kv_row_elems(layer: Layer) -> tuple[int, int]:
    """(K, V) elements per cell of one layer: n_embd_k_gqa / n_embd_v_gqa; MLA stores one latent as K, no V."""
    return common_kv_row_elems(layer)


def layer_cells(layer: Layer, settings: Settings, pad: int = 256) -> int:
    """Cells per stream of this layer's cache (0 for layers without KV)."""
    if layer.kind in WINDOWED_KINDS and layer.window:
        return swa_cells(layer.window, settings, pad)
    if layer.kind in (LayerKind.FULL, LayerKind.MLA, LayerKind.SLIDING, LayerKind.CHUNKED):
        return settings.n_ctx_seq
    return 0


@dataclass(frozen=True)
class KvBytes:
    k: int
    v: int
    state: int
    #: bytes per layer index (K + V + recurrent state), for placing layers on devices
    per_layer: tuple[int, ...]

    @property
    def total(self) -> int:
        return self.k + self.v + self.state


def kv_bytes(spec: ModelSpec, settings: Settings, pad: int = 256) -> KvBytes:
    """K, V and recurrent-state bytes of the whole model (docs/engines/llamacpp.md#llamacpp-kv-cache).

    Without flash attention V is stored transposed and every layer uses ``n_embd_v_gqa_max``. Recurrent layers
    hold F32 conv (R) and SSM (S) state for ``max(1, n_seq_max) × (1 + n_rs_seq)`` sequences."""
    v_max = max((layer_kv_row_elems(layer)[1] for layer in spec.layers), default=0)
    rows = max(1, settings.n_seq_max) * (1 + settings.n_rs_seq)
    k_total = v_total = state_total = 0
    per_layer = []
    for layer in spec.layers:
        k_elems, v_elems = layer_kv_row_elems(layer)
        if v_elems and not settings.flash_attn:
            v_elems = v_max
        cells = layer_cells(layer, settings, pad) * settings.n_stream
        k_bytes = row_size(settings.type_k, k_elems) * cells if k_elems else 0
        v_bytes = row_size(settings.type_v, v_elems) * cells if v_elems else 0
        state = 4 * layer.state_elems * rows if layer.kind in RECURRENT_KINDS else 0
        k_total, v_total, state_total = k_total + k_bytes, v_total + v_bytes, state_total + state
        per_layer.append(k_bytes + v_bytes + state)
    return KvBytes(k=k_total, v=v_total, state=state_total, per_layer=tuple(per_layer))
