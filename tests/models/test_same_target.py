"""Same-target positives: only same-target samples, never the anchor unless it is alone."""
from __future__ import annotations

from collections import Counter

import torch
from recbole.data.interaction import Interaction

from recbole_ext.models.same_target import SAMPLE_INDEX_FIELD, SameTargetSampler


def test_positives_share_the_target_and_skip_the_anchor():
    torch.manual_seed(0)
    targets = torch.tensor([5, 3, 5, 9, 3, 5, 7, 3, 5, 1])  # groups of 4, 3; singletons 9, 7, 1
    sampler = SameTargetSampler(targets)
    anchors = torch.arange(len(targets)).repeat(400)
    positives = sampler.sample(anchors)
    assert torch.equal(targets[positives], targets[anchors])
    alone = torch.tensor([Counter(targets.tolist())[int(t)] == 1 for t in targets[anchors]])
    assert torch.equal(positives == anchors, alone)
    # every other member of a group is drawn, roughly uniformly (400 draws over 3 candidates each)
    for anchor in range(len(targets)):
        drawn = Counter(positives[anchors == anchor].tolist())
        members = {i for i in range(len(targets)) if targets[i] == targets[anchor] and i != anchor} or {anchor}
        assert set(drawn) == members
        assert min(drawn.values()) > 400 / len(members) * 0.7


def test_brute_force_pairs_on_random_targets():
    """Against a direct definition: the set of valid positives of each anchor."""
    torch.manual_seed(1)
    targets = torch.randint(1, 40, (300,))
    sampler = SameTargetSampler(targets)
    anchors = torch.arange(300).repeat(20)
    positives = sampler.sample(anchors)
    target = targets.tolist()
    valid = [[i for i in range(300) if target[i] == target[a] and i != a] or [a] for a in range(300)]
    assert all(p in valid[a] for a, p in zip(anchors.tolist(), positives.tolist()))


class FakeDataset:
    def __init__(self, features):
        self.inter_feat = Interaction(features)


class FakeModel:
    ITEM_SEQ, ITEM_SEQ_LEN, POS_ITEM_ID = "item_id_list", "item_length", "item_id"


def test_from_dataset_tags_rows_and_returns_the_positives_sequences():
    item_seq = torch.tensor([[1, 0], [2, 3], [4, 0], [5, 6]])
    dataset = FakeDataset({"item_id_list": item_seq, "item_length": torch.tensor([1, 2, 1, 2]),
                           "item_id": torch.tensor([7, 8, 7, 9])})
    sampler = SameTargetSampler.from_dataset(dataset, FakeModel)
    assert torch.equal(dataset.inter_feat[SAMPLE_INDEX_FIELD], torch.arange(4))
    batch = dataset.inter_feat[torch.tensor([2, 0, 3])]  # as RecBole's loader slices rows
    positive = sampler.positive_batch(FakeModel, batch)
    assert torch.equal(positive["item_id_list"], item_seq[[0, 2, 3]])
    assert torch.equal(positive["item_length"], torch.tensor([1, 1, 2]))
