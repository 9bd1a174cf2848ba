"""seeded(seed): the model builders' deterministic start (torch's global seed and a generator)."""
import torch


def seeded(seed):
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)
