"""Unit tests for trainclinic.evaluation (watch_validation, graph_meter, bn_mlp) and the lesson 06 checks."""
import copy

import pytest
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from trainclinic import evaluation as ev
from trainclinic.checks import CheckFailed
from trainclinic.checks import missing_eval as checks


def _moved(model, loader):
    """The loader's batches on the model's device (the checks also run on a simulated cuda:0 with CPU batches)."""
    device = next(model.parameters()).device
    return [(x.to(device), y.to(device)) for x, y in loader]


def _count(loader):
    """The samples the loader yields (a drop_last loader yields fewer than its data set holds)."""
    return sum(len(y) for _, y in loader)


def evaluate(model, loader):
    was = model.training
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in _moved(model, loader):
            correct += (model(x).argmax(1) == y).sum().item()
            total += len(y)
    model.train(was)
    return correct / total


def train_epoch(model, loader, optimizer):
    model.train()
    return _steps(model, loader, optimizer)


def _data(n=20):
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 8, generator=g), torch.randint(0, 3, (n,), generator=g)


def test_bn_mlp_is_seeded_and_has_dropout_and_batchnorm():
    a, b = ev.bn_mlp(seed=1), ev.bn_mlp(seed=1)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    kinds = {type(m).__name__ for m in a.modules()}
    assert {"BatchNorm1d", "Dropout", "Linear"} <= kinds


def test_mode():
    m = ev.bn_mlp()
    assert ev.mode(m.train()) == "train"
    assert ev.mode(m.eval()) == "eval"
    m[1].train()
    assert ev.mode(m) == "mixed"


def test_graph_meter_counts_saved_tensors_only_with_autograd_on():
    m = ev.bn_mlp().eval()
    x, _ = _data()
    with ev.graph_meter(m) as on:
        m(x)
    with torch.no_grad(), ev.graph_meter(m) as off:
        m(x)
    assert on.saved > 0 and on.nbytes > 0 and on.seconds > 0
    assert off.saved == 0 and off.nbytes == 0
    with ev.graph_meter() as with_params:  # without the model, parameters count as bytes too
        m(x)
    assert with_params.saved == on.saved and with_params.nbytes > on.nbytes
    assert "tensors saved for backward" in str(on)


def test_watch_sees_training_mode_autograd_and_batchnorm_updates():
    m = ev.bn_mlp().train()
    x, _ = _data()
    with ev.watch_validation(m, keep_outputs=True) as w:
        m(x)
        m(x)
    assert len(w.calls) == 2 and w.train_calls == 2 and w.grad_calls == 2
    assert w.bn_batches == 2 and w.bn_change > 0
    assert not torch.equal(w.outputs[0], w.outputs[1])  # dropout
    assert w.mode_before == w.mode_after == "train"
    assert "CHANGED" in str(w)


def test_watch_on_a_correct_evaluation():
    m = ev.bn_mlp().train()
    x, y = _data()
    with ev.watch_validation(m) as w:
        evaluate(m, DataLoader(TensorDataset(x, y), batch_size=7))
    assert len(w.calls) == 3 and w.train_calls == 0 and w.grad_calls == 0 and w.meter.saved == 0
    assert w.bn_batches == 0 and w.bn_change == 0
    assert w.mode_after == "train" and "untouched" in str(w)


def test_batch_of_one_raises_pytorchs_error_in_training_mode():
    m = ev.bn_mlp().train()
    x, _ = _data()
    with pytest.raises(ValueError, match=checks.BATCH_OF_ONE):
        m(x[:1])
    m.eval()
    assert m(x[:1]).shape == (1, 3)


def test_reference_passes_every_check(capsys):
    checks.check_evaluate_eval(evaluate)
    checks.check_evaluate_eval(evaluate, n=33, batch_size=16)  # last batch of one
    checks.check_evaluate_no_grad(evaluate)
    checks.check_evaluate_restores(evaluate)
    checks.check_train_epoch(train_epoch)
    out = capsys.readouterr()
    assert out.out.count("✓") == 5 and out.err == ""


def inference_mode_evaluate(model, loader):
    was = model.training
    model.eval()
    try:
        with torch.inference_mode():
            hits = sum((model(x).argmax(-1) == y).sum() for x, y in _moved(model, loader))
            return hits.item() / _count(loader)
    finally:
        model.train(was)


def test_inference_mode_passes():
    checks.check_evaluate_eval(inference_mode_evaluate)
    checks.check_evaluate_no_grad(inference_mode_evaluate)
    checks.check_evaluate_restores(inference_mode_evaluate)


def copy_evaluate(model, loader):
    frozen = copy.deepcopy(model).eval()  # evaluates a copy: the model itself never changes mode
    with torch.no_grad():
        return sum((frozen(x).argmax(1) == y).sum().item() for x, y in _moved(frozen, loader)) / _count(loader)


def test_evaluating_a_deep_copy_passes():
    """`watch_validation` follows the model into copy.deepcopy, so a correct fix that evaluates a copy is graded correct."""
    checks.check_evaluate_eval(copy_evaluate)
    checks.check_evaluate_no_grad(copy_evaluate)
    checks.check_evaluate_restores(copy_evaluate)


def no_eval(model, loader):
    with torch.no_grad():
        return sum((model(x).argmax(1) == y).sum().item() for x, y in _moved(model, loader)) / _count(loader)


def no_grad_missing(model, loader):
    was = model.training
    model.eval()
    acc = sum((model(x).argmax(1) == y).sum().item() for x, y in _moved(model, loader)) / _count(loader)
    model.train(was)
    return acc


def never_restored(model, loader):
    model.eval()
    with torch.no_grad():
        return sum((model(x).argmax(1) == y).sum().item() for x, y in _moved(model, loader)) / _count(loader)


def always_train(model, loader):
    acc = never_restored(model, loader)
    model.train()
    return acc


def mean_of_batches(model, loader):
    was = model.training
    model.eval()
    with torch.no_grad():
        accs = [(model(x).argmax(1) == y).float().mean().item() for x, y in _moved(model, loader)]
    model.train(was)
    return sum(accs) / len(accs)


def _steps(model, loader, optimizer):
    losses = []
    for x, y in _moved(model, loader):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return sum(losses) / len(losses)


@pytest.mark.parametrize("check,fn,message", [
    (checks.check_evaluate_eval, no_eval, "two evaluations of the same data"),
    (checks.check_evaluate_no_grad, no_grad_missing, "autograd recording a graph"),
    (checks.check_evaluate_restores, never_restored, "on a model in train mode: expected train, observed eval"),
    (checks.check_evaluate_restores, always_train, "on a model in eval mode: expected eval, observed train"),
    (checks.check_evaluate_eval, mean_of_batches, "the accuracy returned"),
    (checks.check_train_epoch, _steps, "call model.train() at the start of every epoch"),
])
def test_wrong_fix_fails_with_its_message(check, fn, message):
    with pytest.raises(CheckFailed, match=message.replace("(", r"\(").replace(")", r"\)")):
        check(fn)


@pytest.mark.parametrize("check,fn", [
    (checks.check_evaluate_no_grad, no_eval),
    (checks.check_evaluate_restores, no_eval),
    (checks.check_evaluate_eval, no_grad_missing),
    (checks.check_evaluate_restores, no_grad_missing),
    (checks.check_evaluate_eval, never_restored),
    (checks.check_evaluate_no_grad, always_train),
])
def test_wrong_fix_keeps_the_other_checks(check, fn):
    check(fn)


def test_batch_of_one_gets_a_hint():
    with pytest.raises(CheckFailed, match="last batch has one sample"):
        checks.check_evaluate_eval(no_eval, n=33, batch_size=16)  # last batch of one


def test_seeds_sweep_sizes_short_last_batches_and_dtypes():
    cases = [checks.case(seed, last_one=True) for seed in range(50)]
    assert any(c["n"] % c["batch_size"] == 1 for c in cases)  # a last batch of one, for evaluate
    assert {c["dtype"] for c in cases} == {torch.float32, torch.float64}
    assert len({(c["hidden"], c["classes"]) for c in cases}) > 4
    for seed in range(50):
        last = checks.case(seed, train=True)
        assert 2 <= last["n"] % last["batch_size"] < last["batch_size"]  # short, never of one (BatchNorm trains)


def unmoved_evaluate(model, loader):
    was = model.training
    model.eval()
    with torch.no_grad():
        acc = sum((model(x).argmax(1) == y).sum().item() for x, y in loader) / _count(loader)
    model.train(was)
    return acc


def unmoved_train_epoch(model, loader, optimizer):
    model.train()
    losses = []
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return sum(losses) / len(losses)


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the checks run on the real device")
@pytest.mark.parametrize("check,fn", [(checks.check_evaluate_eval, unmoved_evaluate),
                                      (checks.check_train_epoch, unmoved_train_epoch)])
def test_a_batch_never_moved_fails_on_a_cpu_only_machine(check, fn):
    with pytest.raises(CheckFailed, match="expected every batch moved to the model's device"):
        check(fn)


def tensor_evaluate(model, loader):
    was = model.training
    model.eval()
    with torch.no_grad():
        hits = sum((model(x).argmax(1) == y).sum() for x, y in _moved(model, loader))
    model.train(was)
    return hits / _count(loader)


def tensor_train_epoch(model, loader, optimizer):
    model.train()
    total = 0
    for x, y in _moved(model, loader):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total = total + loss
    return total / len(loader)


def test_tensors_are_not_python_floats():
    with pytest.raises(CheckFailed, match="expected a Python float, observed a 0-d tensor"):
        checks.check_evaluate_eval(tensor_evaluate)
    with pytest.raises(CheckFailed, match="still holds its autograd graph"):
        checks.check_train_epoch(tensor_train_epoch)


def global_no_grad_evaluate(model, loader):
    torch.set_grad_enabled(False)
    return evaluate(model, loader)


def test_grad_mode_switched_off_for_good_fails_and_is_restored():
    assert torch.is_grad_enabled()
    with pytest.raises(CheckFailed, match="autograd after evaluate returns"):
        checks.check_evaluate_no_grad(global_no_grad_evaluate)
    assert torch.is_grad_enabled()  # the check gave the learner's session its autograd back
    checks.check_train_epoch(train_epoch)


def drawing_train_epoch(model, loader, optimizer):
    torch.rand(7)  # other Dropout masks than a plain epoch's, from the caller's stream: still a correct epoch
    return train_epoch(model, loader, optimizer)


def reseeding_train_epoch(model, loader, optimizer):
    torch.manual_seed(0)  # the same Dropout masks at every epoch
    return train_epoch(model, loader, optimizer)


def per_sample_train_epoch(model, loader, optimizer):
    model.train()
    total = 0.0
    for x, y in _moved(model, loader):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(y)
    return total / len(loader.dataset)


def test_train_epoch_replays_the_learners_dropout_masks_and_wants_the_mean_of_batch_losses():
    for seed in range(3):
        checks.check_train_epoch(drawing_train_epoch, seed=seed)
        with pytest.raises(CheckFailed, match="that is the mean over samples"):
            checks.check_train_epoch(per_sample_train_epoch, seed=seed)
        with pytest.raises(CheckFailed, match="train_epoch reseeds the global random stream"):
            checks.check_train_epoch(reseeding_train_epoch, seed=seed)


def test_blank_fails_every_check():
    def blank(*args):
        raise NotImplementedError()

    for check in (checks.check_evaluate_eval, checks.check_evaluate_no_grad, checks.check_evaluate_restores,
                  checks.check_train_epoch):
        with pytest.raises(CheckFailed, match="not written yet"):
            check(blank)


def test_hidden_train_case_has_more_than_ten_batches():
    """A mean over the last 10 batches only must show on a hidden seed: odd seeds run 11 or more batches."""
    for seed in (1, 3):
        c = checks.case(seed, train=True)
        assert c["n"] // c["batch_size"] > 10
    c = checks.case(0, train=True)
    assert (c["n"], c["batch_size"]) == (52, 16)  # the visible case is the lesson's


def probing_train_epoch(model, loader, optimizer):
    """Correct: an eval-mode accuracy probe under no_grad after each step is not a training step."""
    losses = []
    for x, y in _moved(model, loader):
        model.train()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            model(x)
        model.train()
    return sum(losses) / len(losses)


def statement_evaluate(model, loader):
    """Wrong: autograd switched by statements, so a caller with autograd off gets it back on."""
    was = model.training
    model.eval()
    torch.set_grad_enabled(False)
    correct = total = 0
    for x, y in _moved(model, loader):
        correct += (model(x).argmax(1) == y).sum().item()
        total += len(y)
    torch.set_grad_enabled(True)
    model.train(was)
    return correct / total


def test_no_grad_probes_between_steps_pass_and_grad_mode_is_kept_as_found():
    for seed in (0, 1):
        checks.check_train_epoch(probing_train_epoch, seed=seed)
    with pytest.raises(CheckFailed, match="when called with autograd off"):
        checks.check_evaluate_no_grad(statement_evaluate)
    assert torch.is_grad_enabled()
    with torch.no_grad():
        checks.check_evaluate_no_grad(evaluate)
        assert not torch.is_grad_enabled()
