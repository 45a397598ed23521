"""The compile-time breakdown: dynamo / AOTAutograd / Inductor / codegen per entry of
`get_compilation_metrics()`, forward frames and lazily compiled backward graphs alike."""

import time
from types import SimpleNamespace

import pytest

from harness.measure.compile_metrics import STAGES, entry_stages, is_backward_entry, stage_breakdown


def _frame(dynamo, aot=None, inductor=None, codegen=None):
    return SimpleNamespace(dynamo_cumulative_compile_time_us=dynamo, aot_autograd_cumulative_compile_time_us=aot,
                           inductor_cumulative_compile_time_us=inductor,
                           inductor_code_gen_cumulative_compile_time_us=codegen, is_forward=True)


def _backward(total, inductor=None, codegen=None):
    # the shape torch 2.13 gives a lazily compiled backward: no Dynamo time, no is_forward
    return SimpleNamespace(backward_cumulative_compile_time_us=total, inductor_cumulative_compile_time_us=inductor,
                           inductor_code_gen_cumulative_compile_time_us=codegen, is_forward=None)


# the entries of a real mlp-deep tiny train step compiled with inductor on CPU (torch 2.13):
# the backward's Inductor time (2.73 s) is outside every frame's AOTAutograd time
TRAIN_INDUCTOR = [
    _frame(166815),
    _frame(3296751, 3114662, 2054918, 1780810),
    _backward(2774507, 2730673, 2596951),
    _frame(33046), _frame(36163),
    _frame(3699160, 3021841, 2499897, 2027793),
    _frame(8774),
    _frame(37720, 11492, 405),
]


def test_backward_inductor_time_no_longer_eats_aot_autograd():
    bd = stage_breakdown(TRAIN_INDUCTOR)
    # AOTAutograd minus Inductor inside each entry, the backward's included
    assert bd["aot_autograd"] == pytest.approx(((3114662 - 2054918) + (2774507 - 2730673) + (3021841 - 2499897)
                                                + (11492 - 405)) / 1e6, abs=1e-6)
    assert bd["aot_autograd"] > 1.6  # the old sum-then-subtract gave 0.0 for this run
    assert bd["dynamo"] == pytest.approx((166815 + 3296751 - 3114662 + 33046 + 36163 + 3699160 - 3021841 + 8774
                                          + 37720 - 11492) / 1e6, abs=1e-6)
    assert bd["inductor_codegen"] == pytest.approx((1780810 + 2596951 + 2027793) / 1e6, abs=1e-6)
    assert bd["backward"] == pytest.approx(2.774507, abs=1e-6)
    # the total is every frame's Dynamo time plus the backward compile: nothing lost, nothing twice
    frames = sum(e.dynamo_cumulative_compile_time_us for e in TRAIN_INDUCTOR if not is_backward_entry(e))
    assert bd["total"] == pytest.approx((frames + 2774507) / 1e6, abs=1e-6)
    assert sum(bd[s] for s in STAGES) == pytest.approx(bd["total"], abs=1e-5)


def test_aot_eager_backward_is_aot_autograd_only():
    stages = entry_stages(_backward(46943))
    assert stages == {"dynamo": 0.0, "aot_autograd": pytest.approx(0.046943), "inductor": 0.0, "inductor_codegen": 0.0}


def test_inner_timer_above_outer_is_never_negative_and_still_adds_up():
    # rounding in torch's timers: Inductor 1 us longer than the AOTAutograd that contains it
    stages = entry_stages(_frame(5000, 3000, 3001, 1000))
    assert min(stages.values()) >= 0
    assert stages["aot_autograd"] == 0.0 and sum(stages.values()) == pytest.approx(0.005)


def test_no_entries_is_all_zero():
    assert stage_breakdown([]) == {"total": 0.0, "dynamo": 0.0, "aot_autograd": 0.0, "inductor": 0.0,
                                   "inductor_codegen": 0.0, "backward": 0.0}


def _compiled_train_step_breakdown(backend):
    """Compile a tiny train step (the harness's own train_step) cold, run it once, and return
    the breakdown with the first call's wall seconds."""
    import torch
    import torch._dynamo
    import torch._inductor.config as inductor_config
    import torch._inductor.cpu_vec_isa as vec

    from harness.measure.compile_metrics import CompileObserver
    from harness.model.scenarios import default_loss, make_train_step

    vec.pick_vec_isa()  # Inductor's ISA probe is not the model's compile (DESIGN.md)
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    step = torch.compile(make_train_step(model, model, "sgd", default_loss, (torch.randn(8, 16),), {}),
                         backend=backend)
    with inductor_config.patch(force_disable_caches=True):  # cold: every stage really runs
        observer = CompileObserver().start()
        start = time.perf_counter()
        step()
        wall = time.perf_counter() - start
        snap = observer.snapshot()
    torch._dynamo.reset()
    return snap["compile_breakdown_s"], wall


@pytest.mark.compat  # compile metrics
@pytest.mark.parametrize("backend", ["inductor", "aot_eager"])
def test_real_train_step_stages_are_positive_and_add_up(backend):
    bd, wall = _compiled_train_step_breakdown(backend)
    assert bd["dynamo"] > 0 and bd["aot_autograd"] > 0, bd
    assert bd["backward"] > 0, bd  # the lazily compiled backward is counted
    if backend == "inductor":
        assert bd["inductor"] > 0 and bd["inductor_codegen"] > 0, bd
    else:  # aot_eager has no Inductor stage
        assert bd["inductor"] == 0 and bd["inductor_codegen"] == 0, bd
    assert sum(bd[s] for s in STAGES) == pytest.approx(bd["total"], abs=1e-5)
    # the stages happen inside the first call: their sum cannot exceed its wall time
    assert bd["total"] <= wall * 1.01, (bd, wall)
