"""The original Transformer (Vaswani et al., 2017, "Attention Is All You Need") as a Hugging Face model.

Reading order: helpers (positions, norms, DropHead, LayerDrop), attention, feed-forward, the residual sublayer
connection, encoder and decoder layers, `VaswaniPreTrainedModel`, the two stacks, `VaswaniModel` and
`VaswaniForConditionalGeneration`. Section numbers refer to the paper. The decoder-only and encoder-only models
(`modeling_vaswani_lm.py`) are built from the same layers and stacks.

Options are resolved once in `__init__` (which norm class, which position table, FixNorm or not); `forward`
methods never look at config strings. This file imports only torch and transformers, and its sibling
`configuration_vaswani.py`, so a saved folder loads with `trust_remote_code=True`.
"""

import contextlib
import inspect
import math
import threading
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils import logging
from transformers.utils.generic import can_return_tuple
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .configuration_vaswani import VaswaniConfig
from .generation_vaswani import (
    CACHE_FIELD,
    VaswaniGenerationMixin,
    cache_argument,
    output_cache,
    paper_beam_search,
    reorder_beam_cache,
)

logger = logging.get_logger(__name__)


# ----------------------------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------------------------
def shift_tokens_right(input_ids: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Decoder inputs from labels: prepend the start token, drop the last token, turn -100 into PAD.

    (B, T) -> (B, T)
    """
    shifted = input_ids.new_zeros(input_ids.shape)
    shifted[:, 1:] = input_ids[:, :-1].clone()
    shifted[:, 0] = decoder_start_token_id
    shifted.masked_fill_(shifted == -100, pad_token_id)
    return shifted


# transformers' mask helper asks the device whether a padding mask holds any padding (`mask.all()` read back by the
# host, which waits for every kernel queued before it) so as to drop a mask that masks nothing. Training batches are
# padded nearly always, and on a GPU each such wait leaves the device idle while the host catches up (two a forward
# pass: the encoder's mask and the cross-attention's), so in training the mask is built without asking. (The option
# came with a later transformers 5.x; without it the helper asks, as before.)
_CAN_SKIP_THE_PADDING_CHECK = "allow_is_bidirectional_skip" in inspect.signature(create_bidirectional_mask).parameters

# transformers 5.24 renamed the cache argument from `past_key_values` to `cache`, in its mask helpers as in
# `generate()`'s calls of the model (`generation_vaswani.cache_argument`); the mask helpers take the old name, with a
# deprecation warning, until 5.40. Looked up once.
_MASK_CACHE_ARGUMENT = "cache" if "cache" in inspect.signature(create_causal_mask).parameters else "past_key_values"


def causal_mask(cache: Cache | None, **kwargs):
    """transformers' `create_causal_mask(**kwargs)` for new tokens that follow those already in `cache`."""
    return create_causal_mask(**kwargs, **{_MASK_CACHE_ARGUMENT: cache})


def bidirectional_mask(training: bool, **kwargs):
    """transformers' `create_bidirectional_mask(**kwargs)`; in training without reading the mask back from the
    device (see above). The same attention either way: a mask of all ones masks nothing."""
    if training and _CAN_SKIP_THE_PADDING_CHECK:
        kwargs["allow_is_bidirectional_skip"] = False
    return create_bidirectional_mask(**kwargs)


def sinusoidal_position_table(num_positions: int, dim: int, start: int = 0) -> torch.Tensor:
    """The paper's positional encodings (Section 3.5), interleaved as in the paper's formula:

        PE[pos, 2i]   = sin(pos / 10000^(2i / d))
        PE[pos, 2i+1] = cos(pos / 10000^(2i / d))

    for pos in [start, start + num_positions). Returns a float32 tensor of shape (num_positions, dim).
    (fairseq and tensor2tensor concatenate [sin | cos] instead; the paper interleaves.)
    """
    position = torch.arange(start, start + num_positions, dtype=torch.float64).unsqueeze(1)  # (P, 1)
    two_i = torch.arange(0, dim, 2, dtype=torch.float64)  # (ceil(d/2),)
    angle = position / torch.pow(10000.0, two_i / dim)  # (P, ceil(d/2))
    table = torch.empty(num_positions, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : dim // 2])
    return table.float()


def sinusoid_inverse_frequencies(dim: int) -> torch.Tensor:
    """1 / 10000^(2i / d) for i = 0 .. ceil(d/2) - 1: the angular frequencies of Section 3.5, float32 (ceil(d/2),)."""
    two_i = torch.arange(0, dim, 2, dtype=torch.float64)
    return torch.pow(10000.0, -two_i / dim).float()


class VaswaniSinusoidalPositionalEmbedding(nn.Module):
    """Fixed sinusoidal positions (Section 3.5), computed for the positions asked for, so any input length works
    and the positions may be a tensor (a static cache's length): no branch depends on a value, which keeps
    `torch.compile(fullgraph=True)` and `torch.export` working. The frequencies are a non-persistent buffer,
    rebuilt by `_init_weights` after loading. `num_positions` is no limit here (only learned positions have one).
    In float32, as rotary embeddings are; for positions below 1024 it matches the float64 table of
    `sinusoidal_position_table` to about 1e-4."""

    def __init__(self, num_positions: int, embedding_dim: int):
        super().__init__()
        self.num_positions = num_positions
        self.embedding_dim = embedding_dim
        self.register_buffer("inv_freq", sinusoid_inverse_frequencies(embedding_dim), persistent=False)

    def forward(
        self, seq_len: int, past_length: int | torch.Tensor = 0, position_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(seq_len, d) encodings of positions past_length .. past_length + seq_len - 1, or (B, T, d) encodings of
        the given `position_ids` (B, T) (a left-padded batch's positions count from each row's first token)."""
        if position_ids is None:
            position_ids = torch.arange(seq_len, device=self.inv_freq.device) + past_length  # (T,)
        angle = position_ids[..., None].float() * self.inv_freq  # (..., T, ceil(d/2))
        # Interleave: PE[..., 2i] = sin, PE[..., 2i+1] = cos (odd d drops the last cos column).
        return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(-2)[..., : self.embedding_dim]  # (..., T, d)


def concatenated_sinusoid_table(num_positions: int, dim: int) -> torch.Tensor:
    """Marian's table of `sinusoidal_layout="concatenated"`, computed as Marian computes it (float64, rounded to
    float32): PE[pos, :ceil(d/2)] = sin(pos / 10000^(2i/d)), PE[pos, ceil(d/2):] = cos(pos / 10000^(2i/d)).
    Returns (num_positions, dim) float32."""
    position = torch.arange(num_positions, dtype=torch.float64).unsqueeze(1)  # (P, 1)
    exponent = 2 * torch.div(torch.arange(dim), 2, rounding_mode="floor").double() / dim  # 2i/d for columns 2i, 2i+1
    angle = position / torch.pow(10000.0, exponent)  # (P, d)
    return torch.cat([torch.sin(angle[:, 0::2]), torch.cos(angle[:, 1::2])], dim=1).float()


class VaswaniConcatenatedSinusoidalPositionalEmbedding(VaswaniSinusoidalPositionalEmbedding):
    """The same sinusoids with the sines in the first ceil(d/2) dimensions and the cosines in the last floor(d/2)
    (`sinusoidal_layout="concatenated"`): Marian's layout (transformers' `MarianSinusoidalPositionalEmbedding`),
    where the paper interleaves.

    The first `num_positions` rows are Marian's own numbers (`concatenated_sinusoid_table`, a non-persistent buffer
    rebuilt by `_init_weights`), so a converted Marian model computes exactly what Marian computes; later positions
    (where Marian's table ends) are computed in float32 like the interleaved ones, so there is no length limit."""

    def __init__(self, num_positions: int, embedding_dim: int):
        super().__init__(num_positions, embedding_dim)
        self.register_buffer("table", concatenated_sinusoid_table(num_positions, embedding_dim), persistent=False)

    def forward(
        self, seq_len: int, past_length: int | torch.Tensor = 0, position_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(seq_len, d) encodings of positions past_length .. past_length + seq_len - 1, or (B, T, d) encodings of
        the given `position_ids` (B, T), as the interleaved class."""
        if position_ids is None:
            position_ids = torch.arange(seq_len, device=self.inv_freq.device) + past_length  # (T,)
        angle = position_ids[..., None].float() * self.inv_freq  # (..., T, ceil(d/2))
        # [sin | cos]: PE[..., i] = sin, PE[..., ceil(d/2) + i] = cos (odd d drops the last cos column).
        computed = torch.cat([angle.sin(), angle.cos()[..., : self.embedding_dim // 2]], dim=-1)  # (..., T, d)
        stored = self.table[position_ids.clamp(max=self.num_positions - 1)]  # (..., T, d)
        return torch.where((position_ids < self.num_positions)[..., None], stored, computed)


def fairseq_inverse_frequencies(dim: int) -> torch.Tensor:
    """fairseq's frequencies exp(-i * ln(10000) / (d/2 - 1)) for i = 0 .. d/2 - 1 (d/2 rounded down), computed in
    float32 as fairseq's `SinusoidalPositionalEmbedding.get_embedding` does. (The paper's are 10000^(-2i/d): the
    two agree only at i = 0.) Returns (d // 2,)."""
    half_dim = dim // 2
    step = math.log(10000) / (half_dim - 1)
    return torch.exp(torch.arange(half_dim, dtype=torch.float) * -step)


class VaswaniFairseqSinusoidalPositionalEmbedding(VaswaniSinusoidalPositionalEmbedding):
    """fairseq's sinusoids (`sinusoidal_layout="fairseq"`, `fairseq.modules.SinusoidalPositionalEmbedding`):
    [sin | cos] halves of d // 2 dimensions each with `fairseq_inverse_frequencies` (a zero column last for odd d),
    and positions counted from padding_idx + 1, fairseq's offset: the first token of a sequence is position
    padding_idx + 1 (2 with fairseq's dictionary). Computed in float32 as fairseq computes its table, so a converted
    fairseq model gets fairseq's numbers; there is no length limit."""

    def __init__(self, num_positions: int, embedding_dim: int, padding_idx: int = 1):
        super().__init__(num_positions, embedding_dim)
        self.offset = padding_idx + 1
        self.register_buffer("inv_freq", fairseq_inverse_frequencies(embedding_dim), persistent=False)

    def forward(
        self, seq_len: int, past_length: int | torch.Tensor = 0, position_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(seq_len, d) encodings of positions past_length .. past_length + seq_len - 1, or (B, T, d) encodings of
        the given `position_ids` (B, T), each shifted by fairseq's offset."""
        if position_ids is None:
            position_ids = torch.arange(seq_len, device=self.inv_freq.device) + past_length  # (T,)
        angle = (position_ids + self.offset)[..., None].float() * self.inv_freq  # (..., T, d // 2)
        table = torch.cat([angle.sin(), angle.cos()], dim=-1)  # (..., T, 2 * (d // 2))
        return F.pad(table, (0, self.embedding_dim - table.shape[-1]))  # (..., T, d)


class VaswaniLearnedPositionalEmbedding(nn.Embedding):
    """Learned absolute positions, the paper's ablation (E) of Table 3. Limited to `num_positions`."""

    def forward(
        self, seq_len: int, past_length: int | torch.Tensor = 0, position_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(seq_len, d) embeddings of positions past_length .. past_length + seq_len - 1, or (B, T, d) embeddings of
        the given `position_ids` (B, T), which are below past_length + seq_len (left padding only lowers them)."""
        # A static cache (compiled decoding) gives its length as a tensor; it is bounded by the cache size then.
        if isinstance(past_length, int) and past_length + seq_len > self.num_embeddings:
            raise ValueError(
                f"The sequence needs position {past_length + seq_len - 1}, but learned position embeddings only cover "
                f"positions 0..{self.num_embeddings - 1} (max_position_embeddings={self.num_embeddings}). Shorten or "
                "truncate the input, or use position_embedding_type='sinusoidal', which has no length limit."
            )
        if position_ids is None:
            position_ids = torch.arange(seq_len, device=self.weight.device) + past_length
        return super().forward(position_ids)


class ScaleNorm(nn.Module):
    """ScaleNorm (Nguyen & Salazar 2019): `g * x / max(||x||_2, eps)` with one learned scalar `g`, init sqrt(d)."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.scale = nn.Parameter(torch.tensor(math.sqrt(dim)))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        norm = torch.linalg.vector_norm(hidden_states, dim=-1, keepdim=True).clamp(min=self.eps)  # (..., 1)
        return hidden_states * (self.scale / norm)


class UnitNorm(nn.Module):
    """FixNorm's row normalisation (Nguyen & Salazar 2019): scale each vector to unit L2 length."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return F.normalize(hidden_states, dim=-1)


class OutputProjection(nn.Linear):
    """The pre-softmax projection (Section 3.4): logits = h W^T (+ b). `logit_weight` is the matrix the logits are
    taken against (for the fused loss, which runs the product itself)."""

    def logit_weight(self) -> torch.Tensor:
        return self.weight


_UNIT_ROWS_LOCK = threading.Lock()  # guards FixNormLinear's scope count


class FixNormLinear(OutputProjection):
    """Output projection of FixNorm: logits against the unit-length (tied) embedding rows. Normalised at every call,
    as training needs (the gradient flows through the normalisation); within `rows_normalized_once()` (decoding,
    whose steps cannot change the weights) once on entering."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._unit_rows: torch.Tensor | None = None  # (V, d): set while `_decodings` > 0
        self._decodings = 0  # the `rows_normalized_once()` scopes open, in every thread

    def logit_weight(self) -> torch.Tensor:
        if self._unit_rows is not None:
            return self._unit_rows
        return F.normalize(self.weight, dim=-1)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return F.linear(hidden_states, self.logit_weight(), self.bias)

    @contextlib.contextmanager
    def rows_normalized_once(self):
        """The unit-length rows computed once for the steps run inside (the same values each step would compute);
        the weights must not change while any such scope is open. Scopes nest and may overlap across threads (they
        share the rows); when the last one closes, every call normalises again."""
        with _UNIT_ROWS_LOCK:
            if self._decodings == 0:
                with torch.no_grad():
                    self._unit_rows = F.normalize(self.weight, dim=-1)
            self._decodings += 1
        try:
            yield
        finally:
            with _UNIT_ROWS_LOCK:
                self._decodings -= 1
                if self._decodings == 0:
                    self._unit_rows = None

    def __getstate__(self) -> dict:
        """A copy (`copy.deepcopy`, pickle) made inside a scope does not inherit its rows: it normalises per call."""
        return {**super().__getstate__(), "_unit_rows": None, "_decodings": 0}


class FusedProjection(nn.Linear):
    """`num_blocks` projections d -> d applied to the same input, stored as one (num_blocks * d, d) matrix so that
    they run as one matrix product (nn.MultiheadAttention's `in_proj` layout). Each d x d block is initialised on
    its own (see `VaswaniPreTrainedModel._init_weights`)."""

    def __init__(self, dim: int, num_blocks: int):
        super().__init__(dim, num_blocks * dim)
        self.num_blocks = num_blocks

    def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(..., d) -> num_blocks tensors (..., d)"""
        return super().forward(hidden_states).chunk(self.num_blocks, dim=-1)


NORM_CLASSES = {"layernorm": nn.LayerNorm, "scalenorm": ScaleNorm}
POSITION_EMBEDDING_CLASSES = {
    "sinusoidal": VaswaniSinusoidalPositionalEmbedding,
    "learned": VaswaniLearnedPositionalEmbedding,
}
SINUSOIDAL_LAYOUT_CLASSES = {  # `sinusoidal_layout`, for position_embedding_type="sinusoidal"
    "interleaved": VaswaniSinusoidalPositionalEmbedding,
    "concatenated": VaswaniConcatenatedSinusoidalPositionalEmbedding,
    "fairseq": VaswaniFairseqSinusoidalPositionalEmbedding,
}


class DropHead(nn.Module):
    """DropHead (Zhou et al. 2020): in training, drop whole attention heads per example with probability `p` and
    rescale the kept ones by `h / kept`. If every head of an example would be dropped, all are kept instead, which
    makes the rescaled output unbiased (its expectation is the evaluation output). Identity in evaluation.

    Works on the per-head attention output before the heads are merged, so every attention backend supports it.
    `p` may change between steps (a schedule: see `VaswaniPreTrainedModel.set_drophead`). The forward pass reads the
    rate from a tensor (`rate`, a non-persistent buffer) and only whether it is on from a Python bool, so a compiled
    step (`torch.compile`) is not compiled again for every new rate.
    """

    def __init__(self, p: float = 0.0):
        super().__init__()
        self._p = float(p)  # the rate as set (rebuilds `rate` after loading: `_init_weights`)
        self.active = self._p > 0.0
        self.register_buffer("rate", torch.tensor(self._p), persistent=False)

    @property
    def p(self) -> float:
        return self._p

    @p.setter
    def p(self, value: float) -> None:
        self._p = float(value)
        self.active = self._p > 0.0
        with torch.no_grad():
            self.rate.fill_(self._p)

    def forward(self, attn_output: torch.Tensor) -> torch.Tensor:
        """attn_output: (B, T, h, d_head) -> (B, T, h, d_head)."""
        if not (self.training and self.active):
            return attn_output
        batch_size, _, num_heads, _ = attn_output.shape
        keep = torch.rand(batch_size, num_heads, device=attn_output.device) >= self.rate  # (B, h)
        keep = keep | ~keep.any(dim=-1, keepdim=True)  # all-dropped guard: keep every head of that example
        scale = keep * (num_heads / keep.sum(dim=-1, keepdim=True))  # (B, h): h / kept, or 0 for dropped heads
        return attn_output * scale.to(attn_output.dtype)[:, None, :, None]

    def extra_repr(self) -> str:
        return f"p={self.p}"


class LayerDrop:
    """LayerDrop (Fan et al. 2019): per training forward pass, skip layer i iff u_i < p (one draw per layer shared by
    the batch, no rescaling). Evaluation runs every layer.

    The draws come from a private generator seeded with `config.layerdrop_seed`, not from the global RNG, so every
    process of a data-parallel run (each builds the same model) skips the same layers at the same step, whatever
    else consumed random numbers there. Its state is part of a training checkpoint (`state_dict`).
    """

    def __init__(self, p: float, seed: int):
        self.p = p
        self.generator = torch.Generator(device="cpu")
        self.generator.manual_seed(seed)

    def sample(self, num_layers: int, training: bool) -> list[bool]:
        """Which of `num_layers` layers to skip in this forward pass (none in evaluation)."""
        if not training or self.p == 0.0:
            return [False] * num_layers
        return (torch.rand(num_layers, generator=self.generator) < self.p).tolist()

    def state_dict(self) -> dict:
        return {"p": self.p, "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.p = state["p"]
        self.generator.set_state(state["generator"])


class LabelSmoothedCrossEntropy(torch.autograd.Function):
    """Label-smoothed cross-entropy summed over the rows whose target is not `ignore_index` (Section 5.4).

    The smoothed target puts 1 - eps + eps/V on the label and eps/V on every class, as
    `F.cross_entropy(label_smoothing=eps)` does, so per row, with z the logits and lse = logsumexp(z):

        loss = -sum_v q_v log p_v = lse - (1 - eps) * z_label - eps * mean_v(z_v)
        d loss / d z = softmax(z) - (1 - eps) * onehot(label) - eps / V

    Computing both directly keeps no (N, V) log-probabilities next to the logits (log_softmax + nll keeps them for
    its backward) and makes fewer passes over the largest tensor of training.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor, eps: float, ignore_index: int) -> torch.Tensor:
        """logits (N, V) float, labels (N,) -> scalar"""
        valid = labels != ignore_index  # (N,)
        labels = labels.masked_fill(~valid, 0)
        lse = torch.logsumexp(logits, dim=-1)  # (N,)
        label_logit = logits.gather(1, labels[:, None]).squeeze(1)  # (N,)
        loss = lse - (1.0 - eps) * label_logit - eps * logits.mean(dim=-1)
        ctx.save_for_backward(logits, labels, lse, valid)
        ctx.eps = eps
        return torch.where(valid, loss, 0.0).sum()

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        logits, labels, lse, valid = ctx.saved_tensors
        eps = ctx.eps
        grad = torch.sub(logits, lse[:, None]).exp_()  # softmax (N, V)
        grad.sub_(eps / logits.shape[-1])
        grad.scatter_add_(1, labels[:, None], torch.full_like(lse[:, None], -(1.0 - eps)))
        grad.mul_((valid.to(grad.dtype) * grad_output)[:, None])
        return grad, None, None, None


def label_smoothed_cross_entropy_sum(
    logits: torch.Tensor, labels: torch.Tensor, eps: float, ignore_index: int
) -> torch.Tensor:
    """The sum `LabelSmoothedCrossEntropy` computes (Section 5.4), written in plain operations for `torch.compile`
    (the trainer's `--compiled_loss`). Compiled by inductor, the forward pass is one kernel that reads the logits in
    their own dtype (bfloat16 under autocast) and computes in float32 without a float32 copy of them, and the
    backward pass one kernel that writes their gradient in that dtype, where the eager Function makes several passes
    over a float32 copy. Run eagerly, this would keep (N, V) float32 tensors for its backward pass: the model calls
    it only compiled.

    logits (N, V) any float dtype, labels (N,) -> scalar (float32)
    """
    z = logits.float()  # (N, V)
    valid = labels != ignore_index  # (N,)
    vocab_size = z.shape[-1]
    # the smoothed target q as a comparison with the label, not a gather: a gather's gradient is a scatter into an
    # (N, V) buffer of its own, where a comparison stays inside the one backward kernel
    is_label = torch.arange(vocab_size, device=z.device) == labels[:, None]  # (N, V)
    q = torch.where(is_label, 1.0 - eps + eps / vocab_size, eps / vocab_size)  # (N, V)
    loss = torch.logsumexp(z, dim=-1) - (q * z).sum(dim=-1)  # (N,): lse - sum_v q_v z_v
    return torch.where(valid, loss, 0.0).sum()


class ChunkedOutputLoss(torch.autograd.Function):
    """The pre-softmax projection (Section 3.4) and the label-smoothed loss (Section 5.4) in one, a chunk of target
    tokens at a time, for training: the (N, V) logits are never held at once, in float32 or at all.

    Per chunk of rows the forward pass makes the chunk's logits z = h W^T + b, adds its rows' losses (as
    `LabelSmoothedCrossEntropy`: lse - (1 - eps) z_label - eps mean(z)) and at once its gradients: with
    g = softmax(z) - (1 - eps) onehot(label) - eps / V on the rows whose label is not `ignore_index` (0 elsewhere),
    dL/dh = g W, dL/dW += g^T h, dL/db += sum of g's rows. The backward pass only scales them by the incoming
    gradient (Liger-Kernel's fused linear cross-entropy; Wijmans et al. 2024, "Cut Your Losses"). The matrix products
    run as autocast would run `nn.Linear` (bf16 under bf16 autocast), the softmax in float32.

    hidden (N, d), weight (V, d), bias (V,) or None, labels (N,) -> the loss summed over the scored rows, ()
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, labels, eps: float, ignore_index: int, chunk_tokens: int):
        needs_hidden, needs_weight, needs_bias = ctx.needs_input_grad[:3]
        gradients = any(ctx.needs_input_grad[:3])
        grad_hidden = torch.zeros_like(hidden) if needs_hidden else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if needs_weight else None
        grad_bias = torch.zeros_like(bias, dtype=torch.float32) if needs_bias else None
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        vocab_size = weight.shape[0]
        for start in range(0, hidden.shape[0], chunk_tokens):
            rows = slice(start, start + chunk_tokens)
            chunk = hidden[rows]  # (C, d)
            logits = F.linear(chunk, weight, bias).float()  # (C, V)
            valid = labels[rows] != ignore_index  # (C,)
            label = labels[rows].masked_fill(~valid, 0)
            lse = torch.logsumexp(logits, dim=-1)  # (C,)
            loss = lse - (1.0 - eps) * logits.gather(1, label[:, None]).squeeze(1) - eps * logits.mean(dim=-1)
            total += torch.where(valid, loss, 0.0).sum()
            if not gradients:
                continue
            grad = logits.sub_(lse[:, None]).exp_()  # softmax, in the logits' memory (C, V)
            grad.sub_(eps / vocab_size)
            grad.scatter_add_(1, label[:, None], torch.full_like(lse[:, None], -(1.0 - eps)))
            grad.mul_(valid[:, None])
            if needs_hidden:
                grad_hidden[rows] = grad @ weight  # (C, d)
            if needs_weight:
                grad_weight += (grad.T @ chunk).float()  # (V, d)
            if needs_bias:
                grad_bias += grad.sum(0)
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
        ctx.dtypes = (hidden.dtype, weight.dtype, None if bias is None else bias.dtype)
        return total

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        grads = [None if grad is None else (grad * grad_output).to(dtype)
                 for grad, dtype in zip(ctx.saved_tensors, ctx.dtypes, strict=True)]  # fmt: skip
        return *grads, None, None, None, None


def every_other_layers_to_keep(num_layers: int, drop_rate: float) -> list[int]:
    """LayerDrop's "every other" pruning strategy (Fan et al. 2019, Section 5): drop depth d (1-based) where
    d = 0 mod floor(1/p), i.e. keep the 0-based layers i with (i + 1) % floor(1/p) != 0.

    >>> every_other_layers_to_keep(6, 0.5)
    [0, 2, 4]
    """
    if not 0.0 <= drop_rate < 1.0:
        raise ValueError(f"drop_rate={drop_rate!r} is not allowed; use a rate in [0, 1).")
    if drop_rate == 0.0:
        return list(range(num_layers))
    period = math.floor(1.0 / drop_rate)
    return [i for i in range(num_layers) if (i + 1) % period != 0]


# ----------------------------------------------------------------------------------------------------------------
# Attention (Section 3.2)
# ----------------------------------------------------------------------------------------------------------------
def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention, Eq. (1): softmax(Q K^T / sqrt(d_k)) V.

    query (B, h, T_q, d_k), key/value (B, h, T_k, d_k), additive mask broadcastable to (B, h, T_q, T_k).
    Returns the output (B, T_q, h, d_k) and the probabilities (B, h, T_q, T_k).
    """
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling  # (B, h, T_q, T_k)
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = F.softmax(attn_weights, dim=-1)
    attn_weights = F.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value).transpose(1, 2).contiguous()  # (B, T_q, h, d_k)
    return attn_output, attn_weights


class VaswaniAttention(nn.Module):
    """Multi-head attention (Section 3.2.2): MultiHead(Q, K, V) = Concat(head_1..head_h) W^O.

    Used three ways (Section 3.2.3): encoder self-attention, masked decoder self-attention (`is_causal=True`) and
    encoder-decoder attention (`is_cross_attention=True`: queries from the decoder, keys and values from the encoder
    states). Projections that read the same input are one matrix: `qkv_proj` (W^Q, W^K, W^V) for self-attention,
    `q_proj` and `kv_proj` (W^K, W^V) for encoder-decoder attention. The kernel comes from transformers' attention
    interface (`config._attn_implementation`: "eager", "sdpa", ...). DropHead acts on the per-head outputs before W^O.
    """

    def __init__(
        self,
        config: VaswaniConfig,
        num_heads: int,
        drophead: float = 0.0,
        is_causal: bool = False,
        is_cross_attention: bool = False,
        layer_idx: int | None = None,
    ):
        super().__init__()
        self.config = config
        self.embed_dim = config.d_model
        self.num_heads = num_heads
        self.head_dim = config.d_model // num_heads
        self.scaling = self.head_dim**-0.5  # 1 / sqrt(d_k)
        self.dropout = config.attention_dropout
        self.is_causal = is_causal
        self.layer_idx = layer_idx

        if is_cross_attention:
            self.q_proj = FusedProjection(self.embed_dim, 1)
            self.kv_proj = FusedProjection(self.embed_dim, 2)
        else:
            self.qkv_proj = FusedProjection(self.embed_dim, 3)
        self.out_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.drophead = DropHead(drophead)

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        attention_mask: torch.Tensor | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """hidden_states (B, T_q, d); key_value_states (B, T_k, d) for cross-attention. Returns (B, T_q, d)."""
        is_cross_attention = key_value_states is not None
        input_shape = hidden_states.shape[:-1]  # (B, T_q)

        # The cache: self-attention appends this step's keys/values; cross-attention computes the encoder's
        # keys/values once (first decoding step) and reuses them afterwards.
        cache, is_updated = None, False
        if past_key_values is not None:
            if isinstance(past_key_values, EncoderDecoderCache):
                is_updated = past_key_values.is_updated.get(self.layer_idx, False)
                cache = (
                    past_key_values.cross_attention_cache
                    if is_cross_attention
                    else past_key_values.self_attention_cache
                )
            else:
                cache = past_key_values

        # Projections (Section 3.2.2), one matrix product per input.
        if is_cross_attention:
            (query_states,) = self.q_proj(hidden_states)
            if is_updated:
                key_states = cache.layers[self.layer_idx].keys  # (B, h, T_k, d_k)
                value_states = cache.layers[self.layer_idx].values
            else:
                key_states, value_states = self.kv_proj(key_value_states)
        else:
            query_states, key_states, value_states = self.qkv_proj(hidden_states)
        query_states = self._split_heads(query_states)  # (B, h, T_q, d_k)
        if not (is_cross_attention and is_updated):
            key_states, value_states = self._split_heads(key_states), self._split_heads(value_states)
            if cache is not None:
                key_states, value_states = cache.update(key_states, value_states, self.layer_idx)
                if is_cross_attention and isinstance(past_key_values, EncoderDecoderCache):
                    past_key_values.is_updated[self.layer_idx] = True

        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        attn_output, attn_weights = attention_interface(
            self,
            query_states,
            key_states,
            value_states,
            attention_mask,
            dropout=self.dropout if self.training else 0.0,
            scaling=self.scaling,
            **kwargs,
        )  # attn_output: (B, T_q, h, d_k)
        attn_output = self.drophead(attn_output)
        attn_output = self.out_proj(attn_output.reshape(*input_shape, -1).contiguous())  # (B, T_q, d)
        return attn_output, attn_weights

    def _split_heads(self, states: torch.Tensor) -> torch.Tensor:
        """(B, T, d) -> (B, h, T, d_k)"""
        return states.unflatten(-1, (-1, self.head_dim)).transpose(1, 2)


class VaswaniFeedForward(nn.Module):
    """Position-wise feed-forward network (Section 3.3): FFN(x) = max(0, x W1 + b1) W2 + b2."""

    def __init__(self, config: VaswaniConfig, ffn_dim: int):
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, config.d_model)
        self.activation_fn = ACT2FN[config.activation_function]
        self.activation_dropout = config.activation_dropout

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """(B, T, d) -> (B, T, d)"""
        hidden_states = self.activation_fn(self.fc1(hidden_states))  # (B, T, d_ff)
        hidden_states = F.dropout(hidden_states, p=self.activation_dropout, training=self.training)
        return self.fc2(hidden_states)


class VaswaniResidual(nn.Module):
    """The residual connection around every sublayer, the one place where residual, norm and dropout meet.

    PostNorm (the paper, Section 3.1 and 5.4):  LayerNorm(x + Dropout(Sublayer(x)))
    PreNorm  (`norm_position="pre"`):            x + Dropout(Sublayer(Norm(x)))   (+ one final norm per stack)

    The norm is LayerNorm or ScaleNorm (`norm_type`). Both placements use the same module, so PostNorm and PreNorm
    checkpoints share one parameter layout.
    """

    def __init__(self, config: VaswaniConfig):
        super().__init__()
        self.norm = NORM_CLASSES[config.norm_type](config.d_model, eps=config.layer_norm_eps)
        self.normalize_before = config.norm_position == "pre"
        self.dropout = config.dropout

    def forward(self, hidden_states: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """(B, T, d) -> (B, T, d)"""
        residual = hidden_states
        if self.normalize_before:
            hidden_states = self.norm(hidden_states)
        hidden_states = F.dropout(sublayer(hidden_states), p=self.dropout, training=self.training)
        hidden_states = residual + hidden_states
        if not self.normalize_before:
            hidden_states = self.norm(hidden_states)
        return hidden_states


# ----------------------------------------------------------------------------------------------------------------
# Layers (Section 3.1)
# ----------------------------------------------------------------------------------------------------------------
class VaswaniEncoderLayer(GradientCheckpointingLayer):
    """Encoder layer: multi-head self-attention, then a position-wise FFN, each inside a `VaswaniResidual`."""

    def __init__(self, config: VaswaniConfig, layer_idx: int | None = None):
        super().__init__()
        self.self_attn = VaswaniAttention(
            config, config.encoder_attention_heads, drophead=config.encoder_drophead, layer_idx=layer_idx
        )
        self.self_attn_residual = VaswaniResidual(config)
        self.ffn = VaswaniFeedForward(config, config.encoder_ffn_dim)
        self.ffn_residual = VaswaniResidual(config)

    def forward(
        self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs
    ) -> torch.Tensor:
        """(B, S, d) -> (B, S, d)"""
        hidden_states = self.self_attn_residual(
            hidden_states, lambda x: self.self_attn(x, attention_mask=attention_mask, **kwargs)[0]
        )
        return self.ffn_residual(hidden_states, self.ffn)


class VaswaniDecoderLayer(GradientCheckpointingLayer):
    """Decoder layer: masked self-attention, encoder-decoder attention, then a position-wise FFN.

    The encoder-decoder attention (and its residual) exists only when `config.is_encoder_decoder` is true: the
    decoder-only language model (`VaswaniDecoderConfig`) has no encoder states to attend to, so its layers have no
    weights for it ("simply remove the cross-attention layer"). `encoder_attn` is then None and `forward` skips it.
    """

    def __init__(self, config: VaswaniConfig, layer_idx: int | None = None):
        super().__init__()
        heads = config.decoder_attention_heads
        self.self_attn = VaswaniAttention(
            config, heads, drophead=config.decoder_drophead, is_causal=True, layer_idx=layer_idx
        )
        self.self_attn_residual = VaswaniResidual(config)
        self.encoder_attn = self.encoder_attn_residual = None
        if config.is_encoder_decoder:
            self.encoder_attn = VaswaniAttention(
                config, heads, drophead=config.cross_drophead, is_cross_attention=True, layer_idx=layer_idx
            )
            self.encoder_attn_residual = VaswaniResidual(config)
        self.ffn = VaswaniFeedForward(config, config.decoder_ffn_dim)
        self.ffn_residual = VaswaniResidual(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        **kwargs,
    ) -> torch.Tensor:
        """(B, T, d) with encoder states (B, S, d) (none for a decoder-only model) -> (B, T, d)"""
        hidden_states = self.self_attn_residual(
            hidden_states,
            lambda x: self.self_attn(x, past_key_values=past_key_values, attention_mask=attention_mask, **kwargs)[0],
        )
        if self.encoder_attn is not None:
            hidden_states = self.encoder_attn_residual(
                hidden_states,
                lambda x: self.encoder_attn(
                    x,
                    key_value_states=encoder_hidden_states,
                    past_key_values=past_key_values,
                    attention_mask=encoder_attention_mask,
                    **kwargs,
                )[0],
            )
        return self.ffn_residual(hidden_states, self.ffn)


# ----------------------------------------------------------------------------------------------------------------
# Pretrained-model plumbing: initialization, pruning, DropHead / LayerDrop controls
# ----------------------------------------------------------------------------------------------------------------
# transformers' `from_pretrained` swaps class attributes while it builds a model (`PreTrainedModel.tie_weights`,
# `init_weights` and torch's init functions become no-ops, and are restored afterwards). Two loads that overlap in
# different threads can restore each other's no-ops, leaving weight tying disabled for the whole process. Our
# `from_pretrained` therefore runs one load at a time.
_FROM_PRETRAINED_LOCK = threading.RLock()


class VaswaniPreTrainedModel(PreTrainedModel):
    config: VaswaniConfig
    config_class = VaswaniConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["VaswaniEncoderLayer", "VaswaniDecoderLayer"]
    # The attention goes through transformers' attention interface exactly as Marian/BART do.
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _can_compile_fullgraph = True

    # The stacks this family of models has (their `*_layers_to_keep` options), the Auto classes its saved folders
    # name in `auto_map` (Auto class -> class name in this class's module; `__init__.py` registers the same), and
    # whether a saved folder carries the translation pipeline. The decoder-only and encoder-only families
    # (modeling_vaswani_lm.py) set their own.
    stack_sides: tuple[str, ...] = ("encoder", "decoder")
    auto_classes: dict[str, str] = {
        "AutoModel": "VaswaniModel",
        "AutoModelForSeq2SeqLM": "VaswaniForConditionalGeneration",
    }
    carries_translation_pipeline: bool = True

    @contextlib.contextmanager
    def output_rows_normalized_once(self):
        """For decoding, whose steps cannot change the weights (`generate()`, and the inference package's own beam
        search): FixNorm's unit-length output rows (`FixNormLinear`) are computed once on entering rather than at
        every step, where normalising the (V, d) matrix took a fifth of a beam-search step of one sentence (d_model
        256, 8,000 tokens, one CPU thread). The outputs are the same; without FixNorm nothing changes."""
        head = self.get_output_embeddings()
        with head.rows_normalized_once() if isinstance(head, FixNormLinear) else contextlib.nullcontext():
            yield

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """fairseq's initialization of the paper's model: token embeddings N(0, d^-0.5) with a zero PAD row (U(-0.01,
        0.01) with FixNorm), Xavier-uniform linear layers with zero biases (gain 1/sqrt(2) for
        the attention input projections), LayerNorm (1, 0), ScaleNorm g = sqrt(d).
        The sinusoids' frequencies and DropHead's rate are non-persistent buffers, rebuilt here (also after
        `from_pretrained`)."""
        config = self.config
        std = config.init_std if config.init_std is not None else config.d_model**-0.5
        if isinstance(module, VaswaniFairseqSinusoidalPositionalEmbedding):
            init.copy_(module.inv_freq, fairseq_inverse_frequencies(module.embedding_dim))
        elif isinstance(module, VaswaniSinusoidalPositionalEmbedding):
            init.copy_(module.inv_freq, sinusoid_inverse_frequencies(module.embedding_dim))
            if isinstance(module, VaswaniConcatenatedSinusoidalPositionalEmbedding):
                init.copy_(module.table, concatenated_sinusoid_table(module.num_positions, module.embedding_dim))
        elif isinstance(module, VaswaniLearnedPositionalEmbedding):
            init.normal_(module.weight, mean=0.0, std=std)
        elif isinstance(module, nn.Embedding):
            if config.fixnorm:
                init.uniform_(module.weight, -0.01, 0.01)
            else:
                init.normal_(module.weight, mean=0.0, std=std)
            # The slice below loses the "already loaded" flag, hence the explicit check (as in transformers).
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, FusedProjection):
            # fairseq: Xavier-uniform with gain 1/sqrt(2) for each of the W^Q, W^K, W^V blocks. (The slices lose the
            # "already loaded" flag, hence the explicit check, as for the PAD row.)
            if not getattr(module.weight, "_is_hf_initialized", False):
                for block in module.weight.chunk(module.num_blocks, dim=0):
                    nn.init.xavier_uniform_(block, gain=2**-0.5)
            init.zeros_(module.bias)
        elif isinstance(module, nn.Linear):
            init.xavier_uniform_(module.weight)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, ScaleNorm):
            init.constant_(module.scale, math.sqrt(module.dim))
        elif isinstance(module, DropHead):
            init.constant_(module.rate, module.p)

    def get_expanded_tied_weights_keys(self, all_submodels: bool = False) -> dict:
        """`PreTrainedModel.get_expanded_tied_weights_keys`, except that `tie_word_embeddings` decides only about the
        output projection: the source/target sharing of `share_embeddings` holds whatever it says. Both are resolved
        into `_tied_weights_keys` in `__init__` (`VaswaniModel`, `VaswaniForConditionalGeneration`); transformers
        ties, saves and loads through this method."""
        if all_submodels:
            return super().get_expanded_tied_weights_keys(all_submodels=True)
        return dict(self._tied_weights_keys or {})

    def resize_token_embeddings(self, new_num_tokens=None, pad_to_multiple_of=None, mean_resizing=True):
        """`PreTrainedModel.resize_token_embeddings`. Source and target share one `vocab_size`, so with
        `share_embeddings=False` the target embedding (a matrix of its own) is resized too."""
        if not self.config.share_embeddings and not isinstance(self, VaswaniStack):
            self.base_model.decoder.resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        return super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)

    # -- pruning (LayerDrop, Fan et al. 2019, Section 5) ----------------------------------------------------------
    # Keyword arguments of `from_pretrained` that say where the config file is (passed on to `get_config_dict`).
    _CONFIG_LOCATION_KWARGS = ("cache_dir", "force_download", "proxies", "local_files_only", "token", "revision",
                               "subfolder")  # fmt: skip

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """`PreTrainedModel.from_pretrained`, plus pruning: `encoder_layers_to_keep=[0, 2]` and/or
        `decoder_layers_to_keep=[...]` (arguments, or values of the given/saved config) load the full checkpoint,
        then keep only those layers (renumbered 0..k-1). The result saves and loads as an ordinary smaller model.

        The full model is built from a copy of the config without the lists, so no state outside the call says
        how to prune; loads from several threads run one at a time (see `_FROM_PRETRAINED_LOCK`)."""
        keep = {side: kwargs.pop(f"{side}_layers_to_keep", None) for side in ("encoder", "decoder")}
        full = {f"{side}_layers_to_keep": None for side in cls.stack_sides}  # a list for a missing stack: see below
        config = kwargs.get("config")
        if isinstance(config, PretrainedConfig):
            settings = config.to_dict()
            kwargs["config"] = config.__class__.from_dict({**settings, **full})
        else:  # the config is read by `super().from_pretrained`; the lists are overridden there, and read here
            location = {key: kwargs[key] for key in cls._CONFIG_LOCATION_KWARGS if key in kwargs}
            settings, _ = cls.config_class.get_config_dict(config or pretrained_model_name_or_path, **location)
            kwargs.update(full)
        keep = {
            side: keep[side] if keep[side] is not None else settings.get(f"{side}_layers_to_keep") for side in keep
        }
        with _FROM_PRETRAINED_LOCK:
            loaded = super().from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded  # output_loading_info=True gives (model, info)
        model.config.validate()
        model.prune_layers(keep["encoder"], keep["decoder"])  # refuses a list for a stack the model lacks
        return loaded

    def save_pretrained(self, save_directory, *args, **kwargs):
        """`PreTrainedModel.save_pretrained`; the `auto_map` of a model registered for `trust_remote_code` lists the
        config and every Auto class of the family (`auto_classes`: for the encoder-decoder `AutoModel` and
        `AutoModelForSeq2SeqLM`), whichever class is saved.

        An encoder-decoder model also carries its translation pipeline: config.json gets the `custom_pipelines` entry
        of `pipeline_vaswani.VaswaniTranslationPipeline`, and transformers copies pipeline_vaswani.py with the other
        modeling files (it follows the `from .pipeline_vaswani import ...` below), so that
        `pipeline(model=folder, trust_remote_code=True)` works."""
        if self._auto_class is not None:
            from .pipeline_vaswani import custom_pipelines_entry

            module = self.__class__.__module__.rsplit(".", 1)[-1]  # "modeling_vaswani", also for remote code
            config_module = self.config.__class__.__module__.rsplit(".", 1)[-1]
            self.config.auto_map = {
                **(getattr(self.config, "auto_map", None) or {}),
                "AutoConfig": f"{config_module}.{self.config.__class__.__name__}",
                **{auto_class: f"{module}.{name}" for auto_class, name in self.auto_classes.items()},
            }
        if self._auto_class is not None and self.carries_translation_pipeline:
            self.config.custom_pipelines = {
                **(getattr(self.config, "custom_pipelines", None) or {}),
                **custom_pipelines_entry(),
            }
        return super().save_pretrained(save_directory, *args, **kwargs)

    def prune_layers(
        self, encoder_layers_to_keep: list[int] | None = None, decoder_layers_to_keep: list[int] | None = None
    ) -> None:
        """Keep only the listed layers of each stack (0-based, increasing), renumber them 0..k-1 and update the
        config (`encoder_layers` = k, `*_layers_to_keep` = None) so the model saves as an ordinary smaller one.
        A stack loaded on its own (`VaswaniEncoder` / `VaswaniDecoder`) prunes itself; a list for the stack it does
        not have is an error."""
        stacks = self._stacks()
        for side, keep in (("encoder", encoder_layers_to_keep), ("decoder", decoder_layers_to_keep)):
            if side not in stacks:
                if keep is not None:
                    raise ValueError(
                        f"{side}_layers_to_keep={keep!r} is not allowed for {self.__class__.__name__}, which has no "
                        f"{side} stack; leave it out."
                    )
                continue
            stack = stacks[side]
            if keep is not None:
                keep = list(keep)
                VaswaniConfig.check_layers_to_keep(f"{side}_layers_to_keep", keep, len(stack.layers))
                stack.layers = nn.ModuleList([stack.layers[i] for i in keep])
                for new_idx, layer in enumerate(stack.layers):
                    for module in layer.modules():
                        if isinstance(module, VaswaniAttention):
                            module.layer_idx = new_idx
                # Record which layers of the original model survive (composing with earlier pruning).
                record = dict(self.config.pruned_layers or {})
                original = record.get(side, list(range(getattr(self.config, f"{side}_layers"))))
                record[side] = [original[i] for i in keep]
                self.config.pruned_layers = record
                setattr(self.config, f"{side}_layers", len(keep))
            setattr(self.config, f"{side}_layers_to_keep", None)

    def _stacks(self) -> dict[str, "VaswaniStack"]:
        """The encoder and/or decoder stack of this model by side: both for `VaswaniModel` and the LM, the one stack
        of a decoder-only or encoder-only model (whose base model is a stack), itself for a stack loaded on its
        own."""
        base = self if isinstance(self, VaswaniStack) else self.base_model
        if isinstance(base, VaswaniStack):
            return {base.side: base}
        return {"encoder": base.encoder, "decoder": base.decoder}

    # -- DropHead and LayerDrop controls ----------------------------------------------------------------------------
    def set_drophead(
        self,
        rate: float | None = None,
        *,
        encoder: float | None = None,
        decoder: float | None = None,
        cross: float | None = None,
    ) -> None:
        """Set the DropHead probability used from now on (a schedule calls this every step). `rate` sets every kind
        of attention the model has (`drophead_kinds`); `encoder` / `decoder` / `cross` set one kind (they win over
        `rate`). A kind the model lacks (e.g. `cross` on a decoder-only model) is a `ValueError`. The config keeps
        the initial values."""
        modules = self._drophead_modules_by_kind()
        explicit = {"encoder": encoder, "decoder": decoder, "cross": cross}
        for kind, value in explicit.items():
            if value is not None and kind not in modules:
                raise ValueError(
                    f"{kind}={value!r}: {type(self).__name__} has no {kind} attention to apply DropHead to; its kinds "
                    f"are {list(modules)}."
                )
        for kind, heads in modules.items():
            value = explicit[kind] if explicit[kind] is not None else rate
            if value is None:
                continue
            if not (isinstance(value, (int, float)) and 0.0 <= value < 1.0):
                raise ValueError(f"DropHead rate for {kind} attention is {value!r}; use a probability in [0, 1).")
            for module in heads:
                module.p = float(value)

    @property
    def drophead_kinds(self) -> tuple[str, ...]:
        """The kinds of attention this model has, for `set_drophead` and `DropHeadScheduler`: "encoder" (encoder
        self-attention), "decoder" (decoder self-attention), "cross" (encoder-decoder attention)."""
        return tuple(self._drophead_modules_by_kind())

    def _drophead_modules(self, kind: str) -> list[DropHead]:
        """The DropHead modules of one kind of attention ([] for a kind the model lacks)."""
        return self._drophead_modules_by_kind().get(kind, [])

    def _drophead_modules_by_kind(self) -> dict[str, list[DropHead]]:
        """kind -> the DropHead modules of that kind of attention, for the kinds this model has."""
        modules = {}
        for side, stack in self._stacks().items():
            modules[side] = [layer.self_attn.drophead for layer in stack.layers]
            if side == "decoder" and stack.config.is_encoder_decoder:  # decoder layers with cross-attention
                modules["cross"] = [layer.encoder_attn.drophead for layer in stack.layers]
        return modules

    @property
    def uses_layerdrop(self) -> bool:
        """Whether LayerDrop can skip layers in training. Skipped layers get no gradient, so data-parallel training
        then needs `DistributedDataParallel(find_unused_parameters=True)` (train.py sets it). All ranks skip the same
        layers (shared seed), so gradients stay consistent. Gradient checkpointing does not mix with it under DDP."""
        return any(getattr(self.config, f"{side}_layerdrop") > 0 for side in self.stack_sides)

    def layerdrop_state_dict(self) -> dict:
        """State of the LayerDrop generators, to save with a training checkpoint (exact resume)."""
        return {side: stack.layerdrop.state_dict() for side, stack in self._stacks().items()}

    def load_layerdrop_state_dict(self, state: dict) -> None:
        for side, stack in self._stacks().items():
            stack.layerdrop.load_state_dict(state[side])


# ----------------------------------------------------------------------------------------------------------------
# Stacks
# ----------------------------------------------------------------------------------------------------------------
class VaswaniStackEmbedding(nn.Module):
    """Input of a stack (Sections 3.4, 3.5, 5.4): Dropout(token embedding * sqrt(d_model) + positional encoding).

    With FixNorm the token embedding is first scaled to unit length.
    """

    def __init__(self, config: VaswaniConfig):
        super().__init__()
        position_class = POSITION_EMBEDDING_CLASSES[config.position_embedding_type]
        if position_class is VaswaniSinusoidalPositionalEmbedding:
            position_class = SINUSOIDAL_LAYOUT_CLASSES[config.sinusoidal_layout]
        # fairseq's sinusoids count positions from pad_token_id + 1 (its offset)
        extra = (
            {"padding_idx": config.pad_token_id}
            if position_class is VaswaniFairseqSinusoidalPositionalEmbedding
            else {}
        )
        self.embed_positions = position_class(config.max_position_embeddings, config.d_model, **extra)
        self.embed_transform = UnitNorm() if config.fixnorm else nn.Identity()
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.dropout = config.dropout

    def forward(
        self,
        inputs_embeds: torch.Tensor,
        past_length: int | torch.Tensor = 0,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Raw token embeddings (B, T, d) of positions past_length.. (or of `position_ids` (B, T)) -> stack input
        (B, T, d)"""
        inputs_embeds = self.embed_transform(inputs_embeds) * self.embed_scale
        positions = self.embed_positions(inputs_embeds.shape[1], past_length, position_ids)  # (T, d) or (B, T, d)
        hidden_states = inputs_embeds + positions.to(inputs_embeds.dtype)
        return F.dropout(hidden_states, p=self.dropout, training=self.training)


class VaswaniStack(VaswaniPreTrainedModel):
    """What the encoder and decoder stacks share (Section 3.1): token embeddings (tied across stacks by
    `VaswaniModel`), the input recipe of `VaswaniStackEmbedding`, N layers skipped by LayerDrop in training, and
    (PreNorm only) one final norm."""

    def __init__(self, config: VaswaniConfig, layer_class: type[nn.Module], num_layers: int, layerdrop: LayerDrop):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
        self.embeddings = VaswaniStackEmbedding(config)
        self.layers = nn.ModuleList([layer_class(config, i) for i in range(num_layers)])
        self.layer_norm = (
            NORM_CLASSES[config.norm_type](config.d_model, eps=config.layer_norm_eps)
            if config.norm_position == "pre"
            else None
        )
        self.layerdrop = layerdrop
        self.gradient_checkpointing = False

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value


class VaswaniEncoder(VaswaniStack):
    """The encoder stack: `config.encoder_layers` [`VaswaniEncoderLayer`]s."""

    side = "encoder"

    _can_record_outputs = {"hidden_states": VaswaniEncoderLayer, "attentions": VaswaniAttention}

    def __init__(self, config: VaswaniConfig):
        layerdrop = LayerDrop(config.encoder_layerdrop, config.layerdrop_seed)
        super().__init__(config, VaswaniEncoderLayer, config.encoder_layers, layerdrop)
        self.post_init()

    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs,
    ) -> BaseModelOutput:
        """input_ids (B, S) with attention_mask (B, S) (1 = token, 0 = PAD) -> last_hidden_state (B, S, d)"""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of input_ids or inputs_embeds to the encoder.")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)  # (B, S, d)
        hidden_states = self.embeddings(inputs_embeds)
        attention_mask = bidirectional_mask(
            self.training, config=self.config, inputs_embeds=hidden_states, attention_mask=attention_mask
        )
        skip = self.layerdrop.sample(len(self.layers), self.training)
        for layer, skipped in zip(self.layers, skip, strict=True):
            if not skipped:
                hidden_states = layer(hidden_states, attention_mask, **kwargs)
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        return BaseModelOutput(last_hidden_state=hidden_states)


class VaswaniDecoder(VaswaniStack):
    """The decoder stack: `config.decoder_layers` [`VaswaniDecoderLayer`]s, with a key/value cache for incremental
    decoding."""

    side = "decoder"
    _can_record_outputs = {
        "hidden_states": VaswaniDecoderLayer,
        "attentions": OutputRecorder(VaswaniAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(VaswaniAttention, index=1, layer_name="encoder_attn"),
    }

    def __init__(self, config: VaswaniConfig):
        layerdrop = LayerDrop(config.decoder_layerdrop, config.layerdrop_seed + 1)
        super().__init__(config, VaswaniDecoderLayer, config.decoder_layers, layerdrop)
        self.post_init()

    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        """input_ids (B, T) (the new tokens only when a cache is given), encoder states (B, S, d) with their mask
        (B, S) -> last_hidden_state (B, T, d) and the updated cache (`past_key_values`, or `cache` as transformers
        >= 5.24 names it)."""
        past_key_values = cache_argument(past_key_values, kwargs)
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of decoder_input_ids or decoder_inputs_embeds to the decoder.")
        if encoder_hidden_states is None:
            raise ValueError(
                "The decoder needs the encoder's output: pass encoder_hidden_states (B, S, d_model) and "
                "encoder_attention_mask (B, S), e.g. model.get_encoder()(input_ids, attention_mask).last_hidden_state."
            )
        use_cache = use_cache if use_cache is not None else self.config.use_cache
        if use_cache and past_key_values is None:
            past_key_values = EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0

        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)  # (B, T, d)
        hidden_states = self.embeddings(inputs_embeds, past_length=past_length)
        self_attn_cache = (
            past_key_values.self_attention_cache
            if isinstance(past_key_values, EncoderDecoderCache)
            else past_key_values
        )
        self_attention_mask = causal_mask(
            self_attn_cache, config=self.config, inputs_embeds=hidden_states, attention_mask=attention_mask
        )
        encoder_attention_mask = bidirectional_mask(
            self.training,
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=encoder_attention_mask,
            encoder_hidden_states=encoder_hidden_states,
        )

        skip = self.layerdrop.sample(len(self.layers), self.training)
        for layer, skipped in zip(self.layers, skip, strict=True):
            if not skipped:
                hidden_states = layer(
                    hidden_states,
                    self_attention_mask,
                    encoder_hidden_states,  # positional, for gradient checkpointing
                    encoder_attention_mask=encoder_attention_mask,
                    past_key_values=past_key_values,
                    **kwargs,
                )
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states, **{CACHE_FIELD: past_key_values if use_cache else None}
        )


# ----------------------------------------------------------------------------------------------------------------
# Models
# ----------------------------------------------------------------------------------------------------------------
class VaswaniModel(VaswaniPreTrainedModel):
    """The bare encoder-decoder Transformer (Figure 1) returning the decoder's last hidden states."""

    def __init__(self, config: VaswaniConfig):
        config.validate()
        super().__init__(config)
        if config.share_embeddings:
            # Section 3.4: one matrix for source and target embeddings (and, in the LM head with
            # `tie_word_embeddings=True`, the output projection).
            self.shared = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
        self._tied_weights_keys = self.shared_embedding_keys(config)
        self.encoder = VaswaniEncoder(config)
        self.decoder = VaswaniDecoder(config)
        self.post_init()
        self.prune_layers(config.encoder_layers_to_keep, config.decoder_layers_to_keep)

    @staticmethod
    def shared_embedding_keys(config: VaswaniConfig, prefix: str = "") -> dict[str, str]:
        """The `{tied: source}` parameter names of source/target sharing (`share_embeddings`), under `prefix`."""
        if not config.share_embeddings:
            return {}
        return {f"{prefix}{side}.embed_tokens.weight": f"{prefix}shared.weight" for side in ("encoder", "decoder")}

    def get_input_embeddings(self) -> nn.Embedding:
        return self.shared if self.config.share_embeddings else self.encoder.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        if self.config.share_embeddings:
            self.shared = value
            self.decoder.set_input_embeddings(value)
        self.encoder.set_input_embeddings(value)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple | BaseModelOutput | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> Seq2SeqModelOutput:
        r"""
        input_ids (`torch.LongTensor` of shape `(batch_size, source_length)`): source tokens.
        attention_mask (`torch.Tensor` of shape `(batch_size, source_length)`): 1 for tokens, 0 for PAD.
        decoder_input_ids (`torch.LongTensor` of shape `(batch_size, target_length)`): target tokens shifted right
            (see `shift_tokens_right`); with a cache, only the new tokens.
        decoder_attention_mask (`torch.Tensor` of shape `(batch_size, target_length)`, *optional*): PAD mask of the
            decoder inputs, combined with the causal mask.
        encoder_outputs (*optional*): precomputed encoder states, reused across decoding steps.
        past_key_values (`EncoderDecoderCache`, *optional*): the decoder's key/value cache (also taken as `cache`,
            transformers >= 5.24's name).
        """
        past_key_values = cache_argument(past_key_values, kwargs)
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(
                last_hidden_state=encoder_outputs[0],
                hidden_states=encoder_outputs[1] if len(encoder_outputs) > 1 else None,
                attentions=encoder_outputs[2] if len(encoder_outputs) > 2 else None,
            )
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            past_key_values=past_key_values,
            inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            **{CACHE_FIELD: output_cache(decoder_outputs)},
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )


class VaswaniForConditionalGeneration(VaswaniPreTrainedModel, VaswaniGenerationMixin):
    """The Transformer with its pre-softmax projection (Section 3.4) and the label-smoothed training loss
    (Section 5.4). `generate()` defaults to the paper's beam search: 4 beams, length penalty 0.6."""

    def __init__(self, config: VaswaniConfig):
        config.validate()
        super().__init__(config)
        self.model = VaswaniModel(config)
        self.lm_head = (FixNormLinear if config.fixnorm else OutputProjection)(
            config.d_model, config.vocab_size, bias=config.final_logits_bias
        )
        # Training only: with a number of tokens here, a forward pass with labels in training mode returns the loss
        # of `ChunkedOutputLoss` (that many target tokens a chunk) and no logits. Set by the trainer (`vaswani
        # train --fused_loss`); evaluation, `generate()` and every caller of `.logits` get the logits as always.
        self.loss_chunk_tokens: int | None = None
        # Training only: `label_smoothed_cross_entropy_sum` compiled (`torch.compile`), which then computes the
        # training loss from the logits in their own dtype. Set by the trainer (`vaswani train --compiled_loss`).
        self.compiled_loss = None
        # `tie_word_embeddings` ties the output projection to the target embedding (Section 3.4); `share_embeddings`
        # makes source and target embedding one matrix. Each switch works without the other.
        self._tied_weights_keys = VaswaniModel.shared_embedding_keys(config, prefix="model.")
        if config.tie_word_embeddings:
            target = "model.shared.weight" if config.share_embeddings else "model.decoder.embed_tokens.weight"
            self._tied_weights_keys["lm_head.weight"] = target
        self.post_init()
        # Decoding defaults of the paper (Section 6.1): beam size 4, length penalty alpha = 0.6. (transformers
        # divides by length**alpha, not by the GNMT penalty the paper used: see `paper_decoding`.) A translation is
        # never empty (fairseq's min_len=1). early_stopping=False keeps searching while a live beam could still win;
        # True stops once 4 hypotheses are finished, which lets improbable beams that end at once crowd out the best
        # one. Saved as generation_config.json.
        self.generation_config.num_beams = 4
        self.generation_config.length_penalty = 0.6
        self.generation_config.early_stopping = False
        self.generation_config.min_new_tokens = 1

    # Section 6.1: "We set the maximum output length during inference to input length + 50".
    MAX_NEW_TOKENS_OVER_SOURCE = 50

    def generate(
        self, inputs: torch.Tensor | None = None, generation_config=None, paper_decoding: bool = False, **kwargs
    ):
        """`GenerationMixin.generate`. When no length limit is set anywhere (argument, `generation_config`,
        `model.generation_config`), the output is capped at the paper's "input length + 50" tokens, using the longest
        source of the batch (non-PAD tokens), instead of transformers' default of 20 tokens.

        `paper_decoding=True` runs the paper's beam search instead (`generation_vaswani.paper_beam_search`): beams
        ranked by the GNMT length penalty ((5 + |Y|) / 6) ** length_penalty and every sentence capped at its own
        source length + 50."""
        if paper_decoding:
            kwargs.setdefault("custom_generate", paper_beam_search)
        config = generation_config if generation_config is not None else self.generation_config
        length_is_set = any(
            value is not None
            for value in (
                kwargs.get("max_length"),
                kwargs.get("max_new_tokens"),
                config.max_length,
                config.max_new_tokens,
            )
        )
        if not length_is_set:
            kwargs["max_new_tokens"] = self._longest_source_length(inputs, kwargs) + self.MAX_NEW_TOKENS_OVER_SOURCE
        with self.output_rows_normalized_once():
            return super().generate(inputs, generation_config, **kwargs)

    @staticmethod
    def _reorder_cache(past_key_values, beam_idx: torch.Tensor):
        """`generate()`'s beam search reorders the cache through this hook when a model has it: the self-attention
        keys and values only, the cross-attention ones being the same in every beam of a sentence
        (`generation_vaswani.reorder_beam_cache`)."""
        reorder_beam_cache(past_key_values, beam_idx)
        return past_key_values

    @staticmethod
    def _longest_source_length(inputs: torch.Tensor | None, kwargs: dict) -> int:
        source = inputs if inputs is not None else kwargs.get("input_ids")
        if source is None:
            source = kwargs.get("inputs_embeds")
        if source is None and kwargs.get("encoder_outputs") is not None:
            source = kwargs["encoder_outputs"][0]
        if source is None:
            return 0
        mask = kwargs.get("attention_mask")
        if mask is not None:
            return int(mask.sum(dim=-1).max())
        return source.shape[1]

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.lm_head = new_embeddings

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple | BaseModelOutput | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, target_length)`, *optional*): target tokens (ending with
            EOS). Positions holding -100 or PAD are ignored. When given, `decoder_input_ids` default to the labels
            shifted right and the output holds the label-smoothed cross-entropy (the paper's training loss, eps =
            `config.label_smoothing`), averaged over the real target tokens. For plain cross-entropy, build the
            model with `label_smoothing=0.0`, or compute `F.cross_entropy` from the returned `logits`.
        num_items_in_batch (*optional*): number of real target tokens in the whole (accumulated) batch, passed by
            the `Trainer`; the loss is then the token sum divided by it, so gradient accumulation averages correctly.
        logits_to_keep (`int` or `torch.Tensor`, *optional*, defaults to 0): compute logits only for the last
            `logits_to_keep` decoder positions (0: all), or for the positions listed in a 1-D tensor. `generate()`
            passes 1, so the output projection runs only where the next token is chosen.
        past_key_values (`EncoderDecoderCache`, *optional*): the decoder's key/value cache; `generate()` of
            transformers >= 5.24 passes it as `cache`, which is taken too.
        """
        past_key_values = cache_argument(past_key_values, kwargs)
        if labels is not None:
            if not (isinstance(logits_to_keep, int) and logits_to_keep == 0):
                raise ValueError(
                    f"logits_to_keep={logits_to_keep!r} cannot be combined with labels: the loss needs the logits of "
                    "every target position. Leave logits_to_keep at 0 when passing labels."
                )
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)

        outputs = self.model(
            input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state  # (B, T, d)
        loss = logits = None
        if labels is not None and self.loss_chunk_tokens and self.training and torch.is_grad_enabled():
            loss = self.fused_label_smoothed_loss(hidden_states, labels, num_items_in_batch)
        else:
            keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
            logits = self.lm_head(hidden_states[:, keep])  # (B, T', V), T' = T unless logits_to_keep is given
            if labels is not None:
                loss = self.label_smoothed_loss(logits, labels, num_items_in_batch)

        # Everything VaswaniModel returned (cache, hidden states, attentions) but its last hidden state, which the
        # logits replace.
        passed_on = {name: value for name, value in outputs.items() if name != "last_hidden_state"}
        return Seq2SeqLMOutput(loss=loss, logits=logits, **passed_on)

    def label_smoothed_loss(
        self, logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None = None
    ) -> torch.Tensor:
        """Label-smoothed cross-entropy (Section 5.4, eps = `config.label_smoothing`), summed over the target tokens
        that are not -100 or PAD and divided by their count (or by `num_items_in_batch`).

        logits (B, T, V), labels (B, T) -> scalar
        """
        labels = labels.to(logits.device).masked_fill(labels == self.config.pad_token_id, -100)
        logits, flat_labels = logits.view(-1, logits.shape[-1]), labels.view(-1)  # (B*T, V), (B*T,)
        if self.compiled_loss is not None and self.training and torch.is_grad_enabled():
            loss = self.compiled_loss(logits, flat_labels, self.config.label_smoothing, -100)
        else:
            loss = LabelSmoothedCrossEntropy.apply(logits.float(), flat_labels, self.config.label_smoothing, -100)
        return self._per_token(loss, labels, num_items_in_batch)

    def fused_label_smoothed_loss(
        self, hidden_states: torch.Tensor, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None = None
    ) -> torch.Tensor:
        """`label_smoothed_loss` of the logits `lm_head` would make of `hidden_states`, computed with them by
        `ChunkedOutputLoss`, `loss_chunk_tokens` target tokens at a time (training only: no logits are returned).

        hidden_states (B, T, d), labels (B, T) -> scalar
        """
        labels = labels.to(hidden_states.device).masked_fill(labels == self.config.pad_token_id, -100)
        loss = ChunkedOutputLoss.apply(
            hidden_states.reshape(-1, hidden_states.shape[-1]), self.lm_head.logit_weight(), self.lm_head.bias,
            labels.view(-1), self.config.label_smoothing, -100, self.loss_chunk_tokens,
        )  # fmt: skip
        return self._per_token(loss, labels, num_items_in_batch)

    @staticmethod
    def _per_token(loss: torch.Tensor, labels: torch.Tensor, num_items_in_batch) -> torch.Tensor:
        """The summed loss divided by the scored tokens of `labels` (-100: not scored), or by `num_items_in_batch`."""
        if num_items_in_batch is None:
            num_items_in_batch = (labels != -100).sum().clamp(min=1)
        elif isinstance(num_items_in_batch, torch.Tensor):
            num_items_in_batch = num_items_in_batch.to(loss.device)
        return loss / num_items_in_batch


__all__ = [
    "VaswaniForConditionalGeneration",
    "VaswaniModel",
    "VaswaniPreTrainedModel",
    "every_other_layers_to_keep",
    "label_smoothed_cross_entropy_sum",
    "shift_tokens_right",
    "sinusoidal_position_table",
]
