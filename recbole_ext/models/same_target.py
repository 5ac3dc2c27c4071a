"""Same-target positives for DuoRec/FEARec's supervised contrastive view.

The pool is RecBole's augmented training set (every prefix → next item of every user, the
``inter_feat`` of the training dataset). For a training sample, the positive is another sample of
the pool whose target item is the same, drawn uniformly, itself excluded; a sample alone with its
target is its own positive (the authors' semantics, spec §1.6).

Built once, vectorised: a stable argsort of the targets groups the samples, and each group is a
contiguous run of that order (start, size, and each sample's rank in its run). Drawing is then
per batch on the model's device: r ~ U{0..size−2}, skip the anchor's own rank, read the order —
no Python loop over samples and no host synchronisation. RecBole 1.2.1's FEARec instead builds
its table with one ``np.where`` per training sample (O(n²): minutes on ML-1M) and samples in a
per-sample Python loop with host copies every batch.

The batch must say which pool sample each row is: :meth:`SameTargetSampler.from_dataset` adds an
index column (``SAMPLE_INDEX_FIELD``) to the training dataset, which RecBole's training loader then
carries into every batch (it indexes ``inter_feat`` rows; it never reorders the dataset).
"""
from __future__ import annotations

import torch
from torch import nn

SAMPLE_INDEX_FIELD = "same_target_sample_index"


class SameTargetSampler(nn.Module):
    """Draws, for pool samples ``anchor``, another pool sample with the same target."""

    def __init__(self, targets: torch.Tensor, item_seq: torch.Tensor | None = None,
                 item_seq_len: torch.Tensor | None = None):
        super().__init__()
        targets = torch.as_tensor(targets).long()
        order = torch.argsort(targets, stable=True)
        counts = torch.bincount(targets)
        starts = torch.cumsum(counts, 0) - counts
        rank = torch.empty_like(order)
        rank[order] = torch.arange(len(order)) - starts[targets[order]]
        # Non-persistent buffers: they follow model.to(device) but stay out of checkpoints.
        for name, tensor in (("order", order), ("group_start", starts[targets]), ("group_size", counts[targets]),
                             ("rank", rank), ("item_seq", item_seq), ("item_seq_len", item_seq_len)):
            self.register_buffer(name, tensor, persistent=False)

    @classmethod
    def from_dataset(cls, dataset, model) -> "SameTargetSampler":
        """The pool of RecBole's training ``dataset``; tags its rows with ``SAMPLE_INDEX_FIELD``."""
        features = dataset.inter_feat
        if model.ITEM_SEQ not in features:
            raise ValueError(f"same-target positives need RecBole's augmented sequential training data "
                             f"(field {model.ITEM_SEQ!r} is missing from the dataset given to the model)")
        features[SAMPLE_INDEX_FIELD] = torch.arange(len(features))
        return cls(features[model.POS_ITEM_ID], features[model.ITEM_SEQ], features[model.ITEM_SEQ_LEN])

    def sample(self, anchor: torch.Tensor) -> torch.Tensor:
        """Pool indices [B] of same-target positives for pool indices ``anchor`` [B]."""
        size = self.group_size[anchor]
        others = (size - 1).clamp(min=1)
        draw = (torch.rand(anchor.shape, device=anchor.device) * others).long().clamp(max=others - 1)
        draw = draw + ((draw >= self.rank[anchor]) & (size > 1)).long()  # skip the anchor's own slot
        return self.order[self.group_start[anchor] + draw]  # a singleton's only slot is itself

    def positive_batch(self, model, interaction) -> dict[str, torch.Tensor]:
        """The positives' sequences as a batch the backbone can encode."""
        if SAMPLE_INDEX_FIELD not in interaction:
            raise KeyError(f"the batch has no {SAMPLE_INDEX_FIELD!r} column: same-target positives need batches "
                           "from the training dataset the model was built with")
        positive = self.sample(interaction[SAMPLE_INDEX_FIELD].to(self.order.device))
        return {model.ITEM_SEQ: self.item_seq[positive], model.ITEM_SEQ_LEN: self.item_seq_len[positive]}
