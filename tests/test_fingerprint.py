"""trainclinic.fingerprint: a hash of every bit of a model's weights, and where two models first differ."""
import torch
from torch import nn

from trainclinic.fingerprint import first_difference, fingerprint


def test_equal_weights_equal_fingerprints():
    torch.manual_seed(0)
    a = nn.Linear(4, 3)
    b = nn.Linear(4, 3)
    b.load_state_dict(a.state_dict())
    assert fingerprint(a) == fingerprint(b) == fingerprint(a.state_dict())
    assert len(fingerprint(a)) == 16 and first_difference(a, b) is None


def test_one_bit_changes_the_fingerprint_and_is_located():
    torch.manual_seed(0)
    a = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    b = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    b.load_state_dict(a.state_dict())
    with torch.no_grad():
        w = b[0].bias
        w[1] = torch.nextafter(w[1], torch.tensor(1.0))  # the smallest step a float32 can take
    assert fingerprint(a) != fingerprint(b)
    where = first_difference(a, b)
    assert where.startswith("0.bias: largest difference")


def test_dtype_shape_and_lists():
    x = torch.arange(6, dtype=torch.float32)
    assert fingerprint(x) != fingerprint(x.double())
    assert fingerprint(x) != fingerprint(x.reshape(2, 3))
    assert fingerprint([x, x]) == fingerprint([x.clone(), x.clone()])
    assert first_difference([x], [x.double()]).startswith("0: torch.float32")
    assert fingerprint(torch.zeros(0)) == fingerprint(torch.zeros(0))
    assert fingerprint(torch.tensor(1.5)) != fingerprint(torch.tensor(2.5))
