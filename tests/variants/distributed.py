"""Lesson 11 (distributed data parallel): plausible wrong fixes (each loses exactly its checks, with the message) and
correct fixes written differently. Format: tests/variants/__init__.py. nbgrader itself grades the first wrong variant
and the first correct one (tests/test_grading.py)."""

TRAIN = '''def train(rank, world, model, dataset, epochs, ckpt_path):
    ddp = DDP(model, find_unused_parameters=True)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            logits, aux = ddp(x)
            F.cross_entropy(logits, y).backward()
            opt.step()
    if rank == 0:
        torch.save(ddp.module.state_dict(), ckpt_path)
    dist.barrier()
'''


def train_with(*changes):
    """The reference train with parts changed: (old, new) pairs."""
    src = TRAIN
    for old, new in changes:
        assert old in src, old
        src = src.replace(old, new)
    return src


ALL = ("check_train_completes", "check_same_parameters", "check_sharding", "check_epoch_order", "check_checkpoint")
SAMPLER = "    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)\n"
SAVE = "    if rank == 0:\n        torch.save(ddp.module.state_dict(), ckpt_path)\n    dist.barrier()\n"

VARIANTS = {
    # the checkpoint saved by every rank (no `if rank == 0`)
    "save_every_rank": {
        "cells": {"train": train_with((SAVE, "    torch.save(ddp.module.state_dict(), ckpt_path)\n    dist.barrier()\n"))},
        "lost": {"check_checkpoint": "rank 0 only"},
    },
    # DDP's unused-parameter error fixed, the data loader left as it was: every rank reads everything
    "no_sampler": {
        "cells": {"train": train_with((SAMPLER, ""), ("sampler.set_epoch(epoch)\n", "pass\n"),
                                      ("sampler=sampler", "shuffle=True"))},
        "lost": {"check_sharding": "without a DistributedSampler every rank trains on the whole data set"},
    },
    # the sampler, without set_epoch: the same order every epoch
    "no_set_epoch": {
        "cells": {"train": train_with(("        sampler.set_epoch(epoch)\n", ""))},
        "lost": {"check_epoch_order": "call sampler.set_epoch(epoch)"},
    },
    # the sampler with shuffle=False (set_epoch then changes nothing)
    "sampler_without_shuffle": {
        "cells": {"train": train_with(("rank=rank, shuffle=True)", "rank=rank, shuffle=False)"))},
        "lost": {"check_epoch_order": "a new shuffle every epoch"},
    },
    # shuffle=True kept on the DataLoader beside the sampler: PyTorch refuses
    "shuffle_and_sampler": {
        "cells": {"train": train_with(("sampler=sampler)", "sampler=sampler, shuffle=True)"))},
        "lost": {c: "sampler option is mutually exclusive with shuffle" for c in ALL},
    },
    # the wrapper's state_dict: keys prefixed with module.
    "save_wrapper_state": {
        "cells": {"train": train_with(("torch.save(ddp.module.state_dict()", "torch.save(ddp.state_dict()"))},
        "lost": {"check_checkpoint": "Missing key(s) in state_dict"},
    },
    # no barrier after the save: the other rank returns before the checkpoint exists
    "no_barrier_after_save": {
        "cells": {"train": train_with(("    dist.barrier()\n", ""))},
        "lost": {"check_checkpoint": "not there yet, or half written, on rank 1"},
    },
    # the barrier inside the `if rank == 0:` (rank 1 never calls it)
    "barrier_on_rank0_only": {
        "cells": {"train": train_with(("    dist.barrier()\n", "        dist.barrier()\n"))},
        "lost": {c: "some ranks only" for c in ALL},
    },
    # DDP as first written: the aux head's parameters get no gradient, iteration 1 fails
    "no_find_unused_parameters": {
        "cells": {"train": train_with(("DDP(model, find_unused_parameters=True)", "DDP(model)"))},
        "lost": {c: "Expected to have finished reduction in the prior iteration" for c in ALL},
    },
    # correct: the aux head frozen before wrapping (DDP ignores it), the sampler from the process group, the
    # original model's state_dict, barriers around the save
    "correct_frozen_aux": {
        "cells": {"train": '''def train(rank, world, model, dataset, epochs, ckpt_path):
    model.aux.requires_grad_(False)
    ddp = DDP(model)
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler, drop_last=False)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            loss = F.cross_entropy(ddp(x)[0], y)
            loss.backward()
            opt.step()
    dist.barrier()
    if dist.get_rank() == 0:
        torch.save(model.state_dict(), ckpt_path)
    dist.barrier()
'''},
        "lost": {},
    },
    # correct: shards by hand, as DistributedSampler does (a new permutation per epoch, padded, every world-th index)
    "correct_manual_shards": {
        "cells": {"train": '''def train(rank, world, model, dataset, epochs, ckpt_path):
    import math
    from torch.utils.data import Subset
    ddp = DDP(model, find_unused_parameters=True)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    n = len(dataset)
    total = math.ceil(n / world) * world
    for epoch in range(epochs):
        order = torch.randperm(n, generator=torch.Generator().manual_seed(1000 + epoch)).tolist()
        order += order[:total - n]
        mine = order[rank:total:world]
        for x, y in DataLoader(Subset(dataset, mine), batch_size=8):
            opt.zero_grad()
            F.cross_entropy(ddp(x)[0], y).backward()
            opt.step()
    if rank == 0:
        state = {k[len("module."):]: v for k, v in ddp.state_dict().items()}
        torch.save(state, ckpt_path)
    dist.barrier()
'''},
        "lost": {},
    },
}


# Blind round 10 (writers saw only the release notebook): cases that were misgraded, then fixed in the checks,
# and correct fixes written differently.
VARIANTS.update({
    # Wrong on odd sizes: drop_last=True gives each rank floor(n/world), not ceil, and one sample is never read, so 
    "blind10_drop_last_sampler": {
        "cells": {"train": 'def train(rank, world, model, dataset, epochs, ckpt_path):\n    """DDP training on `world` ranks: sharded, reshuffled data; one checkpoint from rank 0."""\n    ddp = DDP(model, find_unused_parameters=True)\n    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, drop_last=True)\n    loader = DataLoader(dataset, batch_size=8, sampler=sampler)\n    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)\n    for epoch in range(epochs):\n        sampler.set_epoch(epoch)\n        for x, y in loader:\n            opt.zero_grad()\n            F.cross_entropy(ddp(x)[0], y).backward()\n            opt.step()\n    if rank == 0:\n        torch.save(ddp.module.state_dict(), ckpt_path)\n    dist.barrier()\n'},
        "lost": {'check_sharding': 'samples read per rank'},
    },
    # Wrong per the text (num_replicas=world, 'world ranks'): hard-codes 2 replicas; on 3 or 4 ranks shares overlap 
    "blind10_hardcoded_two_replicas": {
        "cells": {"train": 'def train(rank, world, model, dataset, epochs, ckpt_path):\n    """DDP training on `world` ranks: sharded, reshuffled data; one checkpoint from rank 0."""\n    ddp = DDP(model, find_unused_parameters=True)\n    sampler = DistributedSampler(dataset, num_replicas=2, rank=rank % 2, shuffle=True)   # "we run on 2 ranks"\n    loader = DataLoader(dataset, batch_size=8, sampler=sampler)\n    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)\n    for epoch in range(epochs):\n        sampler.set_epoch(epoch)\n        for x, y in loader:\n            opt.zero_grad()\n            F.cross_entropy(ddp(x)[0], y).backward()\n            opt.step()\n    if rank == 0:\n        torch.save(ddp.module.state_dict(), ckpt_path)\n    dist.barrier()\n'},
        "lost": {'check_sharding': 'num_replicas=world and rank=rank'},
    },
    # Wrong: avoids the unused-parameter error by training the aux head on the labels too; the text: main logits onl
    "blind10_aux_trained_too": {
        "cells": {"train": 'def train(rank, world, model, dataset, epochs, ckpt_path):\n    """DDP training on `world` ranks: sharded, reshuffled data; one checkpoint from rank 0."""\n    ddp = DDP(model)\n    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)\n    loader = DataLoader(dataset, batch_size=8, sampler=sampler)\n    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)\n    for epoch in range(epochs):\n        sampler.set_epoch(epoch)\n        for x, y in loader:\n            opt.zero_grad()\n            logits, aux = ddp(x)\n            (F.cross_entropy(logits, y) + F.cross_entropy(aux, y)).backward()   # "use every output"\n            opt.step()\n    if rank == 0:\n        torch.save(ddp.module.state_dict(), ckpt_path)\n    dist.barrier()\n'},
        "lost": {'check_same_parameters': 'the aux head is not trained here'},
    },
    # Wrong per the text (SGD lr 0.1): applies the linear lr-scaling rule (lr 0.2 on 2 ranks). Everything else is ri
    "blind10_lr_scaled_by_world": {
        "cells": {"train": 'def train(rank, world, model, dataset, epochs, ckpt_path):\n    """DDP training on `world` ranks: sharded, reshuffled data; one checkpoint from rank 0."""\n    ddp = DDP(model, find_unused_parameters=True)\n    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)\n    loader = DataLoader(dataset, batch_size=8, sampler=sampler)\n    opt = torch.optim.SGD(ddp.parameters(), lr=0.1 * world)     # linear scaling rule for the larger global batch\n    for epoch in range(epochs):\n        sampler.set_epoch(epoch)\n        for x, y in loader:\n            opt.zero_grad()\n            F.cross_entropy(ddp(x)[0], y).backward()\n            opt.step()\n    if rank == 0:\n        torch.save(ddp.module.state_dict(), ckpt_path)\n    dist.barrier()\n'},
        "lost": {'check_same_parameters': 'torch.optim.SGD(lr=0.1)'},
    },
    # Correct in behaviour (AMBIGUOUS vs the text): the lesson's section 1 lists 'make every output take part in the
    "blind10_ok_zero_times_aux_in_loss": {
        "cells": {"train": 'def train(rank, world, model, dataset, epochs, ckpt_path):\n    """DDP training on `world` ranks: sharded, reshuffled data; one checkpoint from rank 0."""\n    ddp = DDP(model)                                    # no find_unused_parameters: every output joins the loss\n    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)\n    loader = DataLoader(dataset, batch_size=8, sampler=sampler)\n    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)\n    for epoch in range(epochs):\n        sampler.set_epoch(epoch)\n        for x, y in loader:\n            opt.zero_grad()\n            logits, aux = ddp(x)\n            loss = F.cross_entropy(logits, y) + 0.0 * aux.sum()   # aux gets a zero gradient: never moves\n            loss.backward()\n            opt.step()\n    if rank == 0:\n        torch.save(ddp.module.state_dict(), ckpt_path)\n    dist.barrier()\n'},
        "lost": {},
    },
    # Correct with extra harmless work: Join wrapper, explicit shuffle=False on the loader (allowed with a sampler),
    "blind10_ok_atomic_save_extra_barriers_join": {
        "cells": {"train": 'def train(rank, world, model, dataset, epochs, ckpt_path):\n    """DDP training on `world` ranks: sharded, reshuffled data; one checkpoint from rank 0."""\n    from torch.distributed.algorithms.join import Join\n    ddp = DDP(model, find_unused_parameters=True)\n    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, drop_last=False)\n    loader = DataLoader(dataset, batch_size=8, sampler=sampler, shuffle=False)\n    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.0)\n    with Join([ddp]):                                   # harmless: the sampler already evens the shares\n        for epoch in range(epochs):\n            sampler.set_epoch(epoch)\n            for step, (x, y) in enumerate(loader):\n                opt.zero_grad()\n                logits, aux = ddp(x)\n                F.cross_entropy(logits, y).backward()\n                opt.step()\n    dist.barrier()                                      # every rank done training (extra, harmless)\n    if rank == 0:\n        tmp = ckpt_path + ".tmp"\n        torch.save(ddp.module.state_dict(), tmp)\n        os.replace(tmp, ckpt_path)                      # atomic: nobody ever sees a half-written file\n    dist.barrier()\n    return {"rank": rank, "epochs": epochs}\n'},
        "lost": {},
    },
})

BLIND11 = {  # blind round 11: cases that were misgraded, graded right since
    # correct training; after saving, rank 0 computes the final training accuracy over the whole data set through dd
    'ok_rank0_final_accuracy': {'cells': {'train': 'def train(rank, world, model, dataset, epochs, ckpt_path):\n    """DDP training on `world` ranks: sharded, reshuffled data; one checkpoint from rank 0."""\n    ddp = DDP(model, find_unused_parameters=True)\n    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)\n    loader = DataLoader(dataset, batch_size=8, sampler=sampler)\n    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)\n    for epoch in range(epochs):\n        sampler.set_epoch(epoch)\n        for x, y in loader:\n            opt.zero_grad()\n            F.cross_entropy(ddp(x)[0], y).backward()\n            opt.step()\n    if rank == 0:\n        torch.save(ddp.module.state_dict(), ckpt_path)\n        # a final report on the whole training set, through the plain model (no collective), after the save\n        with torch.no_grad():\n            correct = sum(int(ddp.module(x)[0].argmax(1).eq(y).sum()) for x, y in DataLoader(dataset, batch_size=64))\n        print(f"train accuracy after {epochs} epochs: {correct / len(dataset):.2%}")\n    dist.barrier()\n'},
        'lost': {}},
    # deep-copies the model 'not to modify the caller's object': the copy is trained and saved, the model passed in 
    'defensive_copy': {'cells': {'train': 'import copy\n\n\ndef train(rank, world, model, dataset, epochs, ckpt_path):\n    """DDP training on `world` ranks: sharded, reshuffled data; one checkpoint from rank 0."""\n    model = copy.deepcopy(model)      # never modify the caller\'s object in place\n    ddp = DDP(model, find_unused_parameters=True)\n    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)\n    loader = DataLoader(dataset, batch_size=8, sampler=sampler)\n    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)\n    for epoch in range(epochs):\n        sampler.set_epoch(epoch)\n        for x, y in loader:\n            opt.zero_grad()\n            F.cross_entropy(ddp(x)[0], y).backward()\n            opt.step()\n    if rank == 0:\n        torch.save(ddp.module.state_dict(), ckpt_path)\n    dist.barrier()\n    return ddp.module\n'},
        'lost': {'check_same_parameters': "rank 0's `body` parameters after training: expected changed by the tra"}},
    # SGD(lr=0.1, weight_decay=1e-4): not plain SGD at lr 0.1; body and head decay (the aux head's grad stays None u
    'sgd_weight_decay': {'cells': {'train': 'def train(rank, world, model, dataset, epochs, ckpt_path):\n    """DDP training on `world` ranks: sharded, reshuffled data; one checkpoint from rank 0."""\n    ddp = DDP(model, find_unused_parameters=True)\n    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)\n    loader = DataLoader(dataset, batch_size=8, sampler=sampler)\n    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, weight_decay=1e-4)   # a little regularisation\n    for epoch in range(epochs):\n        sampler.set_epoch(epoch)\n        for x, y in loader:\n            opt.zero_grad()\n            F.cross_entropy(ddp(x)[0], y).backward()\n            opt.step()\n    if rank == 0:\n        torch.save(ddp.module.state_dict(), ckpt_path)\n    dist.barrier()\n'},
        'lost': {'check_same_parameters': 'the parameters after train: expected those of torch.optim.SGD(lr='}},
    # DataLoader(drop_last=True): the short last batch is never read (n=33, world 2: 16 of 17 per rank; n=31, world 
    'loader_drop_last': {'cells': {'train': 'def train(rank, world, model, dataset, epochs, ckpt_path):\n    """DDP training on `world` ranks: sharded, reshuffled data; one checkpoint from rank 0."""\n    ddp = DDP(model, find_unused_parameters=True)\n    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)\n    # full batches only: "a short last batch gives a noisy step"\n    loader = DataLoader(dataset, batch_size=8, sampler=sampler, drop_last=True)\n    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)\n    for epoch in range(epochs):\n        sampler.set_epoch(epoch)\n        for x, y in loader:\n            opt.zero_grad()\n            F.cross_entropy(ddp(x)[0], y).backward()\n            opt.step()\n    if rank == 0:\n        torch.save(ddp.module.state_dict(), ckpt_path)\n    dist.barrier()\n'},
        'lost': {'check_train_completes': "rank 0's samples read in", 'check_same_parameters': 'rank 0 read no samples to train on', 'check_sharding': 'epoch 0: samples read per rank: expected'}},
    # no DistributedSampler: the same seeded permutation on every rank, each rank order[rank::world]. n=32/2 ranks f
    'manual_strided_shards': {'cells': {'train': 'from torch.utils.data import Subset\n\n\ndef train(rank, world, model, dataset, epochs, ckpt_path):\n    """DDP training on `world` ranks: sharded, reshuffled data; one checkpoint from rank 0."""\n    ddp = DDP(model, find_unused_parameters=True)\n    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)\n    for epoch in range(epochs):\n        # the same permutation on every rank (seeded by the epoch), each rank every world-th index\n        order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(epoch)).tolist()\n        loader = DataLoader(Subset(dataset, order[rank::world]), batch_size=8)\n        for x, y in loader:\n            opt.zero_grad()\n            F.cross_entropy(ddp(x)[0], y).backward()\n            opt.step()\n    if rank == 0:\n        torch.save(ddp.module.state_dict(), ckpt_path)\n    dist.barrier()\n'},
        'lost': {'check_train_completes': '`train` on 2 ranks, 33 samples, 2 epochs', 'check_same_parameters': '`train` on 2 ranks, 33 samples, 2 epochs', 'check_sharding': '`train` on 2 ranks, 33 samples, 2 epochs', 'check_epoch_order': '`train` on 2 ranks, 33 samples, 2 epochs', 'check_checkpoint': '`train` on 2 ranks, 33 samples, 2 epochs'}},
}
for _name, _spec in BLIND11.items():
    VARIANTS[f"blind11_{_name}"] = _spec

BLIND12 = {  # blind round 12: cases that were misgraded, graded right since
    # Hard-codes 3 epochs (the demo cell's value) instead of `epochs`: right on the visible run, wrong for other epo
    'hardcoded_three_epochs': {'cells': {'train': 'def train(rank, world, model, dataset, epochs, ckpt_path):\n    """DDP training on `world` ranks: sharded, reshuffled data; one checkpoint from rank 0."""\n    ddp = DDP(model, find_unused_parameters=True)\n    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)\n    loader = DataLoader(dataset, batch_size=8, sampler=sampler)\n    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)\n    for epoch in range(3):                   # the lesson trains for 3 epochs\n        sampler.set_epoch(epoch)\n        for x, y in loader:\n            opt.zero_grad()\n            F.cross_entropy(ddp(x)[0], y).backward()\n            opt.step()\n    if rank == 0:\n        torch.save(ddp.module.state_dict(), ckpt_path)\n    dist.barrier()\n'},
        'lost': {'check_train_completes': "rank 0's epochs (passes over a DataLoader that read samples and traine"}},
    # UNSURE. Training is right, but each epoch it re-reads its shard for an accuracy pass WITHOUT torch.no_grad(): 
    'train_accuracy_pass_without_no_grad': {'cells': {'train': 'def train(rank, world, model, dataset, epochs, ckpt_path):\n    """DDP training on `world` ranks: sharded, reshuffled data; one checkpoint from rank 0."""\n    ddp = DDP(model, find_unused_parameters=True)\n    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)\n    loader = DataLoader(dataset, batch_size=8, sampler=sampler)\n    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)\n    for epoch in range(epochs):\n        sampler.set_epoch(epoch)\n        for x, y in loader:\n            opt.zero_grad()\n            F.cross_entropy(ddp(x)[0], y).backward()\n            opt.step()\n        correct = 0                           # this rank\'s training accuracy, through the plain model (no collective)\n        for x, y in loader:\n            correct += (ddp.module(x)[0].argmax(1) == y).sum().item()\n        print(f"rank {rank} epoch {epoch}: train accuracy {correct / len(sampler):.3f}")\n    if rank == 0:\n        torch.save(ddp.module.state_dict(), ckpt_path)\n    dist.barrier()\n'},
        'lost': {}},
}
for _name, _spec in BLIND12.items():
    VARIANTS[f"blind12_{_name}"] = _spec

BLIND13 = {  # blind round 13: cases that were misgraded, graded right since
    # AMBIGUOUS / invisible to a fork-based check: seeds the sampler from torch.initial_seed(). Forked ranks inherit
    'sampler_seed_from_initial_seed': {'cells': {'train': 'def train(rank, world, model, dataset, epochs, ckpt_path):\n    """DDP training on `world` ranks: sharded, reshuffled data; one checkpoint from rank 0."""\n    ddp = DDP(model, find_unused_parameters=True)\n    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True,\n                                 seed=torch.initial_seed() % 2**31)   # a fresh shuffle every run\n    loader = DataLoader(dataset, batch_size=8, sampler=sampler)\n    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)\n    for epoch in range(epochs):\n        sampler.set_epoch(epoch)\n        for x, y in loader:\n            opt.zero_grad()\n            logits, aux = ddp(x)\n            F.cross_entropy(logits, y).backward()\n            opt.step()\n    if rank == 0:\n        torch.save(ddp.module.state_dict(), ckpt_path)\n    dist.barrier()\n'},
        'lost': {'check_sharding': 'epoch 0: the data set covered by the ranks together: expected all'}},
}
for _name, _spec in BLIND13.items():
    VARIANTS[f"blind13_{_name}"] = _spec

BLIND14 = {  # blind round 14: cases that were misgraded, graded right since
    # Misconception: only rank 0 steps ('it owns the weights'). DDP does not broadcast parameters after construction
    'optimizer_step_on_rank0_only': {'cells': {'train': 'def train(rank, world, model, dataset, epochs, ckpt_path):\n    """DDP training on `world` ranks: sharded, reshuffled data; one checkpoint from rank 0."""\n    ddp = DDP(model, find_unused_parameters=True)\n    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)\n    loader = DataLoader(dataset, batch_size=8, sampler=sampler)\n    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)\n    for epoch in range(epochs):\n        sampler.set_epoch(epoch)\n        for x, y in loader:\n            opt.zero_grad()\n            F.cross_entropy(ddp(x)[0], y).backward()    # DDP syncs the gradients ...\n            if rank == 0:\n                opt.step()                                # ... and rank 0 owns the weights (the one that saves)\n    if rank == 0:\n        torch.save(ddp.module.state_dict(), ckpt_path)\n    dist.barrier()\n'},
        'lost': {'check_train_completes': "rank 1's training steps: expected optimizer steps, or parameters chang", 'check_same_parameters': "rank 1's `body` parameters after training: expected changed by the tra"}},
    # itertools.cycle caches the first pass and replays it: the loader is read ONCE (epoch 0), later 'epochs' replay
    'cycle_the_loader': {'cells': {'train': 'import itertools\n\n\ndef train(rank, world, model, dataset, epochs, ckpt_path):\n    """DDP training on `world` ranks: sharded, reshuffled data; one checkpoint from rank 0."""\n    ddp = DDP(model, find_unused_parameters=True)\n    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)\n    loader = DataLoader(dataset, batch_size=8, sampler=sampler)\n    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)\n    batches = itertools.cycle(loader)                # a step-based loop over an endless stream of batches\n    for step in range(epochs * len(loader)):\n        if step % len(loader) == 0:\n            sampler.set_epoch(step // len(loader))\n        x, y = next(batches)\n        opt.zero_grad()\n        F.cross_entropy(ddp(x)[0], y).backward()\n        opt.step()\n    if rank == 0:\n        torch.save(ddp.module.state_dict(), ckpt_path)\n    dist.barrier()\n'},
        'lost': {'check_train_completes': "rank 0's samples read in", 'check_same_parameters': 'the parameters after train: expected those of torch.optim.SGD(lr=', 'check_epoch_order': 'read: expected at most the'}},
}
for _name, _spec in BLIND14.items():
    VARIANTS[f"blind14_{_name}"] = _spec
BLIND16 = {  # blind round 16: cases that were misgraded, graded right since
    # Reads every batch but skips the short last one (len(x) < 8). Same on every rank (DistributedSampler gives equa
    'skip_short_batches': {'cells': {'train': '\ndef train(rank, world, model, dataset, epochs, ckpt_path):\n    """DDP training on `world` ranks: sharded, reshuffled data; one checkpoint from rank 0."""\n    ddp = DDP(model, find_unused_parameters=True)\n    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)\n    loader = DataLoader(dataset, batch_size=8, sampler=sampler)\n    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)\n    for epoch in range(epochs):\n        sampler.set_epoch(epoch)\n        for x, y in loader:\n            if len(x) < 8:          # a ragged last batch gives a noisy step: skip it\n                continue            # (every rank has the same share size, so no rank hangs)\n            opt.zero_grad()\n            logits, _ = ddp(x)\n            F.cross_entropy(logits, y).backward()\n            opt.step()\n    if rank == 0:\n        torch.save(ddp.module.state_dict(), ckpt_path)\n    dist.barrier()\n'},
        'lost': {'check_train_completes': "rank 0's training steps: expected optimizer steps, or parameters chang", 'check_same_parameters': 'the parameters after train: expected those of torch.optim.SGD(lr='}},
    # Performance 'fix': batches by indexing the wrapped TensorDataset's tensors with the sampler's indices, bypassi
    'fast_tensor_indexing': {'cells': {'train': '\ndef train(rank, world, model, dataset, epochs, ckpt_path):\n    """DDP training on `world` ranks: sharded, reshuffled data; one checkpoint from rank 0."""\n    ddp = DDP(model, find_unused_parameters=True)\n    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)\n    # speed: index the underlying tensors in one go instead of 8 __getitem__ calls per batch\n    base = dataset.dataset if hasattr(dataset, "dataset") else dataset\n    xs, ys = base.tensors\n    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)\n    for epoch in range(epochs):\n        sampler.set_epoch(epoch)\n        order = torch.tensor(list(sampler))\n        for idx in order.split(8):\n            x, y = xs[idx], ys[idx]\n            opt.zero_grad()\n            logits, _ = ddp(x)\n            F.cross_entropy(logits, y).backward()\n            opt.step()\n    if rank == 0:\n        torch.save(ddp.module.state_dict(), ckpt_path)\n    dist.barrier()\n'},
        'lost': {'check_train_completes': "rank 0's samples read in", 'check_same_parameters': 'the batches each rank trained on: expected read through the data set t', 'check_sharding': "rank 0's samples read (in the rank's own process): expected the data s", 'check_epoch_order': "rank 0's samples read (in the rank's own process): expected the data s"}},
    # Converts the caller's model to float64 'for precision': the model handed in comes back float64 (it then raises
    'train_in_float64': {'cells': {'train': '\ndef train(rank, world, model, dataset, epochs, ckpt_path):\n    """DDP training on `world` ranks: sharded, reshuffled data; one checkpoint from rank 0."""\n    model.double()                        # float64 on CPU: "more exact, and the CPU is fast enough"\n    ddp = DDP(model, find_unused_parameters=True)\n    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)\n    loader = DataLoader(dataset, batch_size=8, sampler=sampler)\n    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)\n    for epoch in range(epochs):\n        sampler.set_epoch(epoch)\n        for x, y in loader:\n            opt.zero_grad()\n            logits, _ = ddp(x.double())\n            F.cross_entropy(logits, y).backward()\n            opt.step()\n    if rank == 0:\n        torch.save(ddp.module.state_dict(), ckpt_path)\n    dist.barrier()\n'},
        'lost': {'check_same_parameters': "the dtype of rank 0's model (the caller's) after training"}},
}
for _name, _spec in BLIND16.items():
    VARIANTS[f"blind16_{_name}"] = _spec
BLIND17 = {  # blind round 17: cases that were misgraded, graded right since
    # Correct with extra harmless work: after training, every rank averages its parameters (all_reduce, then / world) 'to 
    'ok_final_param_average': {'cells': {'train': '\ndef train(rank, world, model, dataset, epochs, ckpt_path):\n    """DDP training on `world` ranks: sharded, reshuffled data; one checkpoint from rank 0."""\n    ddp = DDP(model, find_unused_parameters=True)\n    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)\n    loader = DataLoader(dataset, batch_size=8, sampler=sampler)\n    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)\n    for epoch in range(epochs):\n        sampler.set_epoch(epoch)\n        for x, y in loader:\n            opt.zero_grad()\n            F.cross_entropy(ddp(x)[0], y).backward()\n            opt.step()\n    with torch.no_grad():                      # make sure every rank ends with the same weights\n        for p in model.parameters():\n            dist.all_reduce(p)  # a sum (gloo has no ReduceOp.AVG on torch 2.4)\n            p.div_(world)\n    if rank == 0:\n        torch.save(ddp.module.state_dict(), ckpt_path)\n    dist.barrier()\n'},
        'lost': {}},
}
for _name, _spec in BLIND17.items():
    VARIANTS[f"blind17_{_name}"] = _spec


BLIND18 = {  # blind round 18: cases that were misgraded, graded right since
    # Typo-class bug: set_epoch(step) instead of set_epoch(epoch); step is the previous epoch's last batch index. On
    'set_epoch_stale_step_variable': {'cells': {'train': 'def train(rank, world, model, dataset, epochs, ckpt_path):\n    """DDP training on `world` ranks: sharded, reshuffled data; one checkpoint from rank 0."""\n    ddp = DDP(model, find_unused_parameters=True)\n    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)\n    loader = DataLoader(dataset, batch_size=8, sampler=sampler)\n    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)\n    step = 0\n    for epoch in range(epochs):\n        sampler.set_epoch(step)          # meant `epoch`: `step` is the previous epoch\'s last batch index\n        for step, (x, y) in enumerate(loader):\n            opt.zero_grad()\n            F.cross_entropy(ddp(x)[0], y).backward()\n            opt.step()\n    if rank == 0:\n        torch.save(ddp.module.state_dict(), ckpt_path)\n    dist.barrier()\n'},
        'lost': {'check_epoch_order': 'the order of epoch 2 against epoch 1: expected a different order'}},
    # Replaces the barrier by polling for the file on the other ranks (avoiding 'a collective on some ranks'). The f
    'poll_for_file_instead_of_barrier': {'cells': {'train': 'def train(rank, world, model, dataset, epochs, ckpt_path):\n    """DDP training on `world` ranks: sharded, reshuffled data; one checkpoint from rank 0."""\n    ddp = DDP(model, find_unused_parameters=True)\n    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)\n    loader = DataLoader(dataset, batch_size=8, sampler=sampler)\n    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)\n    for epoch in range(epochs):\n        sampler.set_epoch(epoch)\n        for x, y in loader:\n            opt.zero_grad()\n            F.cross_entropy(ddp(x)[0], y).backward()\n            opt.step()\n    if rank == 0:\n        torch.save(ddp.module.state_dict(), ckpt_path)\n    else:\n        while not os.path.exists(ckpt_path):      # no collective on some ranks only: poll the file system instead\n            time.sleep(0.005)\n'},
        'lost': {'check_checkpoint': 'when train returned on each rank, the checkpoint: expected completely'}},
}
for _name, _spec in BLIND18.items():
    VARIANTS[f"blind18_{_name}"] = _spec


BLIND19 = {  # blind round 19: cases that were misgraded, graded right since
    # 'Never overwrite a checkpoint': rank 0 saves only when ckpt_path does not exist. On a fresh path it is exactly
    'save_if_not_exists': {'cells': {'train': 'def train(rank, world, model, dataset, epochs, ckpt_path):\n    ddp = DDP(model, find_unused_parameters=True)\n    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)\n    loader = DataLoader(dataset, batch_size=8, sampler=sampler)\n    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)\n    for epoch in range(epochs):\n        sampler.set_epoch(epoch)\n        for x, y in loader:\n            opt.zero_grad()\n            F.cross_entropy(ddp(x)[0], y).backward()\n            opt.step()\n    if rank == 0 and not os.path.exists(ckpt_path):   # never clobber a checkpoint\n        torch.save(ddp.module.state_dict(), ckpt_path)\n    dist.barrier()\n'},
        'lost': {'check_checkpoint': 'nothing replaced it'}},
    # Seeds the sampler from the wall clock, read separately on each rank: the ranks agree only when they build thei
    'sampler_seed_wallclock': {'cells': {'train': 'import time\n\n\ndef train(rank, world, model, dataset, epochs, ckpt_path):\n    ddp = DDP(model, find_unused_parameters=True)\n    # a different shuffle every run, not the same seed-0 permutations each time\n    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=int(time.time()))\n    loader = DataLoader(dataset, batch_size=8, sampler=sampler)\n    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)\n    for epoch in range(epochs):\n        sampler.set_epoch(epoch)\n        for x, y in loader:\n            opt.zero_grad()\n            F.cross_entropy(ddp(x)[0], y).backward()\n            opt.step()\n    if rank == 0:\n        torch.save(ddp.module.state_dict(), ckpt_path)\n    dist.barrier()\n'},
        'lost': {'check_sharding': 'must shuffle with the same seed'}},
    # An atomic write done in the wrong order: the rename to ckpt_path happens on rank 0 AFTER the barrier, so the o
    'atomic_rename_after_barrier': {'cells': {'train': 'def train(rank, world, model, dataset, epochs, ckpt_path):\n    ddp = DDP(model, find_unused_parameters=True)\n    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)\n    loader = DataLoader(dataset, batch_size=8, sampler=sampler)\n    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)\n    for epoch in range(epochs):\n        sampler.set_epoch(epoch)\n        for x, y in loader:\n            opt.zero_grad()\n            F.cross_entropy(ddp(x)[0], y).backward()\n            opt.step()\n    tmp = ckpt_path + ".tmp"\n    if rank == 0:\n        torch.save(ddp.module.state_dict(), tmp)       # atomic write: a temp file first...\n    dist.barrier()\n    if rank == 0:\n        os.replace(tmp, ckpt_path)                     # ...renamed once everybody is here\n'},
        'lost': {'check_checkpoint': 'when train returned on each rank, the checkpoint'}},
}
for _name, _spec in BLIND19.items():
    VARIANTS[f"blind19_{_name}"] = _spec
