"""Optimization: gradient accumulation, clipping, several optimizers, counters, state."""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import pytest
import torch
from torch import nn

from rltrain.agents.base import LearningAgent, Policy
from rltrain.optim import Optimization, OptimizationSettings, fused_adam_step
from rltrain.types import Progress


def make_optimizer(kind: str, params: Any, lr: float) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=lr) if kind == "sgd" else torch.optim.Adam(params, lr=lr)


def mse(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return ((model(x) - y) ** 2).mean()


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_accumulating_k_averaged_losses_equals_one_step_on_the_concatenated_batch(
        kind: str) -> None:
    torch.manual_seed(0)
    k, batch = 3, 4
    model_a = nn.Linear(3, 2)
    model_b = copy.deepcopy(model_a)
    accumulating = Optimization({"m": make_optimizer(kind, model_a.parameters(), 0.05)},
                                progress=Progress(),
                                settings=OptimizationSettings(accumulate_grad_batches=k,
                                                              on_nan_loss="raise"))
    single = Optimization({"m": make_optimizer(kind, model_b.parameters(), 0.05)},
                          progress=Progress())
    initial = model_a.weight.detach().clone()
    for _ in range(3):  # several optimizer steps, so Adam's moments matter too
        x, y = torch.randn(k * batch, 3), torch.randn(k * batch, 2)
        stepped = [accumulating.step("m", mse(model_a, xi, yi))
                   for xi, yi in zip(x.split(batch), y.split(batch), strict=True)]
        assert stepped == [False, False, True]
        assert single.step("m", mse(model_b, x, y)) is True
        for pa, pb in zip(model_a.parameters(), model_b.parameters(), strict=True):
            assert torch.allclose(pa, pb, atol=1e-6)
    assert not torch.allclose(model_a.weight, initial, atol=1e-3)  # they did learn


def test_parameters_do_not_move_while_accumulating() -> None:
    torch.manual_seed(0)
    model = nn.Linear(2, 1)
    optim = Optimization({"m": torch.optim.SGD(model.parameters(), lr=0.1)}, progress=Progress(),
                         settings=OptimizationSettings(accumulate_grad_batches=2,
                                                       on_nan_loss="raise"))
    before = model.weight.detach().clone()
    x, y = torch.randn(4, 2), torch.randn(4, 1)
    assert optim.step("m", mse(model, x, y)) is False
    assert torch.equal(model.weight, before)
    assert model.weight.grad is not None  # the gradient is kept for the next batch
    assert optim.step("m", mse(model, x, y)) is True
    assert not torch.equal(model.weight, before)
    assert model.weight.grad is None  # zeroed (set to None) after the step


def test_step_without_accumulation_steps_every_call() -> None:
    model = nn.Linear(2, 1)
    optim = Optimization({"m": torch.optim.SGD(model.parameters(), lr=0.1)},
                         progress=Progress())
    x, y = torch.randn(4, 2), torch.randn(4, 1)
    assert [optim.step("m", mse(model, x, y)) for _ in range(3)] == [True, True, True]


def linear_loss_param(grad: list[float]) -> tuple[nn.Parameter, torch.Tensor]:
    """A zero parameter and a loss whose gradient with respect to it is ``grad``."""
    w = nn.Parameter(torch.zeros(len(grad)))
    return w, (w * torch.tensor(grad)).sum()


def test_no_clipping_applies_the_raw_gradient() -> None:
    w, loss = linear_loss_param([30.0, 40.0])
    Optimization({"w": torch.optim.SGD([w], lr=1.0)}, progress=Progress()).step("w", loss)
    assert torch.allclose(w.detach(), torch.tensor([-30.0, -40.0]))


def test_clipping_by_norm_rescales_the_gradient_to_the_max_norm() -> None:
    w, loss = linear_loss_param([30.0, 40.0])  # norm 50
    optim = Optimization({"w": torch.optim.SGD([w], lr=1.0)}, progress=Progress(),
                         settings=OptimizationSettings(gradient_clip_val=5.0,
                                                       gradient_clip_algorithm="norm",
                                                       on_nan_loss="raise"))
    optim.step("w", loss)
    assert torch.allclose(w.detach(), torch.tensor([-3.0, -4.0]), atol=1e-5)


def test_clipping_by_norm_leaves_small_gradients_alone() -> None:
    w, loss = linear_loss_param([0.3, 0.4])  # norm 0.5
    optim = Optimization({"w": torch.optim.SGD([w], lr=1.0)}, progress=Progress(),
                         settings=OptimizationSettings(gradient_clip_val=5.0,
                                                       gradient_clip_algorithm="norm",
                                                       on_nan_loss="raise"))
    optim.step("w", loss)
    assert torch.allclose(w.detach(), torch.tensor([-0.3, -0.4]))


def test_clipping_by_value_clamps_each_element() -> None:
    w, loss = linear_loss_param([30.0, -0.5, -7.0])
    optim = Optimization({"w": torch.optim.SGD([w], lr=1.0)}, progress=Progress(),
                         settings=OptimizationSettings(gradient_clip_val=2.0,
                                                       gradient_clip_algorithm="value",
                                                       on_nan_loss="raise"))
    optim.step("w", loss)
    assert torch.allclose(w.detach(), torch.tensor([-2.0, 0.5, 2.0]))


def test_clipping_by_norm_uses_only_that_optimizers_parameters() -> None:
    big = nn.Parameter(torch.zeros(2))
    small = nn.Parameter(torch.zeros(2))
    optim = Optimization({"big": torch.optim.SGD([big], lr=1.0),
                          "small": torch.optim.SGD([small], lr=1.0)}, progress=Progress(),
                              settings=OptimizationSettings(accumulate_grad_batches=2,
                                                            gradient_clip_val=5.0,
                                                            on_nan_loss="raise"))
    # interleaved, so that "small" holds a pending gradient when "big" is clipped and steps
    for _ in range(2):
        optim.step("big", (big * torch.tensor([30.0, 40.0])).sum())  # accumulates norm 50
        optim.step("small", (small * torch.tensor([0.3, 0.4])).sum())  # accumulates norm 0.5
    assert torch.allclose(big.detach(), torch.tensor([-3.0, -4.0]), atol=1e-5)
    # clipped over all parameters together, small's pending gradient would have shrunk too
    assert torch.allclose(small.detach(), torch.tensor([-0.3, -0.4]))


def test_clipping_by_norm_applies_to_the_accumulated_gradient() -> None:
    w = nn.Parameter(torch.zeros(2))
    optim = Optimization({"w": torch.optim.SGD([w], lr=1.0)}, progress=Progress(),
                         settings=OptimizationSettings(accumulate_grad_batches=2,
                                                       gradient_clip_val=5.0,
                                                       on_nan_loss="raise"))
    # each batch contributes loss/2, gradient [3, 4] (norm 5: within the limit); together
    # they sum to [6, 8] (norm 10), which is clipped once, just before the step, to [3, 4]
    assert optim.step("w", (w * torch.tensor([6.0, 8.0])).sum()) is False
    assert optim.step("w", (w * torch.tensor([6.0, 8.0])).sum()) is True
    assert torch.allclose(w.detach(), torch.tensor([-3.0, -4.0]), atol=1e-5)


class TwoPartAgent(LearningAgent):
    """Two independent linear parts with an optimizer each. ``training_step`` always steps the
    critic and steps the actor only when the batch says so; it reports what stepped."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.actor = nn.Linear(2, 1)
        self.critic = nn.Linear(2, 1)
        self.built = True

    def check_spaces(self, observation_space: gym.Space[Any],
                     action_space: gym.Space[Any]) -> None:
        pass

    def build(self, observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        pass

    def configure_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor": torch.optim.SGD(self.actor.parameters(), lr=0.1),
                "critic": torch.optim.SGD(self.critic.parameters(), lr=0.1)}

    def training_step(self, batch: dict[str, Any], optim: Optimization) -> dict[str, Any]:
        x = batch["x"]
        metrics: dict[str, Any] = {
            "critic": optim.step("critic", (self.critic(x) ** 2).mean())}
        if batch["actor"]:
            metrics["actor"] = optim.step("actor", (self.actor(x) - 1).pow(2).mean())
        return metrics

    def policy(self, device: torch.device) -> Policy:
        raise NotImplementedError


def test_two_optimizers_in_one_training_step_accumulate_independently() -> None:
    agent = TwoPartAgent()
    progress = Progress()
    optim = Optimization(agent.configure_optimizers(), progress=progress,
                         settings=OptimizationSettings(accumulate_grad_batches=2,
                                                       on_nan_loss="raise"))
    x = torch.randn(5, 2)
    actor0 = copy.deepcopy(agent.actor.state_dict())
    critic0 = copy.deepcopy(agent.critic.state_dict())

    assert optim.training_step(agent, {"x": x, "actor": True}) == {"critic": False,
                                                                    "actor": False}
    assert optim.training_step(agent, {"x": x, "actor": False}) == {"critic": True}
    # the critic stepped on its 2nd batch; the actor, with 1 batch, has not moved
    assert torch.equal(agent.actor.weight, actor0["weight"])
    assert not torch.equal(agent.critic.weight, critic0["weight"])
    assert optim.training_step(agent, {"x": x, "actor": True}) == {"critic": False,
                                                                    "actor": True}
    assert not torch.equal(agent.actor.weight, actor0["weight"])
    assert progress.gradient_steps == 3

    # the actor's step used both of its batches: same as one step on the averaged loss
    reference = nn.Linear(2, 1)
    reference.load_state_dict(actor0)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    ((reference(x) - 1).pow(2).mean()).backward()
    ref_opt.step()
    assert torch.allclose(agent.actor.weight, reference.weight, atol=1e-6)
    assert torch.allclose(agent.actor.bias, reference.bias, atol=1e-6)


def test_training_step_advances_gradient_steps_and_returns_the_metrics() -> None:
    agent = TwoPartAgent()
    progress = Progress(gradient_steps=10, env_steps=5)
    optim = Optimization(agent.configure_optimizers(), progress=progress)
    metrics = optim.training_step(agent, {"x": torch.randn(3, 2), "actor": False})
    assert metrics == {"critic": True}
    assert progress.gradient_steps == 11
    optim.training_step(agent, {"x": torch.randn(3, 2), "actor": True})
    assert progress.gradient_steps == 12
    assert progress.env_steps == 5


def test_unknown_optimizer_name_raises_key_error_listing_names() -> None:
    agent = TwoPartAgent()
    optim = Optimization(agent.configure_optimizers(), progress=Progress())
    with pytest.raises(KeyError, match=r"'policy'.*\['actor', 'critic'\]"):
        optim.step("policy", agent.actor(torch.ones(1, 2)).sum())


def test_no_optimizers_or_bad_accumulation_raise() -> None:
    with pytest.raises(ValueError, match="no optimizer"):
        Optimization({}, progress=Progress())
    model = nn.Linear(1, 1)
    with pytest.raises(ValueError, match="accumulate_grad_batches"):
        Optimization({"m": torch.optim.SGD(model.parameters(), lr=0.1)}, progress=Progress(),
                     settings=OptimizationSettings(accumulate_grad_batches=0, on_nan_loss="raise"))


def test_state_dict_round_trip_continues_identically() -> None:
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    optim = Optimization({"m": torch.optim.Adam(model.parameters(), lr=0.01)}, progress=Progress(),
                         settings=OptimizationSettings(accumulate_grad_batches=2,
                                                       on_nan_loss="raise"))
    data = [(torch.randn(4, 3), torch.randn(4, 2)) for _ in range(8)]
    for x, y in data[:4]:  # two full Adam steps, nothing pending
        optim.step("m", mse(model, x, y))
    state = copy.deepcopy(optim.state_dict())
    assert state["pending"] == {"m": 0}

    clone = copy.deepcopy(model)
    restored = Optimization({"m": torch.optim.Adam(clone.parameters(), lr=0.5)},
                            progress=Progress(),
                            settings=OptimizationSettings(accumulate_grad_batches=2,
                                                          on_nan_loss="raise"))
    restored.load_state_dict(state)
    assert restored.optimizers["m"].param_groups[0]["lr"] == 0.01
    for x, y in data[4:]:
        assert optim.step("m", mse(model, x, y)) == restored.step("m", mse(clone, x, y))
    for p, q in zip(model.parameters(), clone.parameters(), strict=True):
        assert torch.equal(p, q)


def test_state_dict_keeps_the_pending_batch_count() -> None:
    model = nn.Linear(2, 1)
    optim = Optimization({"m": torch.optim.SGD(model.parameters(), lr=0.1)}, progress=Progress(),
                         settings=OptimizationSettings(accumulate_grad_batches=3,
                                                       on_nan_loss="raise"))
    optim.step("m", model(torch.ones(1, 2)).sum())
    assert optim.state_dict()["pending"] == {"m": 1}
    other = Optimization({"m": torch.optim.SGD(nn.Linear(2, 1).parameters(), lr=0.1)},
                         progress=Progress(),
                         settings=OptimizationSettings(accumulate_grad_batches=3,
                                                       on_nan_loss="raise"))
    other.load_state_dict(optim.state_dict())
    assert other.state_dict()["pending"] == {"m": 1}


def test_state_dict_round_trip_mid_accumulation_continues_identically() -> None:
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    optim = Optimization({"m": torch.optim.SGD(model.parameters(), lr=0.1)}, progress=Progress(),
                         settings=OptimizationSettings(accumulate_grad_batches=2,
                                                       on_nan_loss="raise"))
    data = [(torch.randn(4, 3), torch.randn(4, 2)) for _ in range(3)]
    optim.step("m", mse(model, *data[0]))  # one batch pending
    state = copy.deepcopy(optim.state_dict())
    clone = copy.deepcopy(model)  # what a checkpoint of the agent holds (no .grad)
    clone.zero_grad(set_to_none=True)
    restored = Optimization({"m": torch.optim.SGD(clone.parameters(), lr=0.1)}, progress=Progress(),
                            settings=OptimizationSettings(accumulate_grad_batches=2,
                                                          on_nan_loss="raise"))
    restored.load_state_dict(state)
    for x, y in data[1:]:
        optim.step("m", mse(model, x, y))
        restored.step("m", mse(clone, x, y))
    for p, q in zip(model.parameters(), clone.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6)


def test_load_state_dict_with_other_optimizer_names_raises() -> None:
    agent = TwoPartAgent()
    state = Optimization(agent.configure_optimizers(), progress=Progress()).state_dict()
    model = nn.Linear(2, 1)
    other = Optimization({"q": torch.optim.SGD(model.parameters(), lr=0.1)},
                         progress=Progress())
    with pytest.raises(ValueError, match=r"\['actor', 'critic'\].*\['q'\]"):
        other.load_state_dict(state)


class ThreePartAgent(LearningAgent):
    """A world model, an actor and a critic stepped in that order in one training step."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.world, self.actor, self.critic = nn.Linear(3, 4), nn.Linear(4, 2), nn.Linear(6, 1)
        self.built = True
        self.seen_dtypes: list[torch.dtype] = []

    def check_spaces(self, observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        pass

    def build(self, observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> None:
        pass

    def configure_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {name: torch.optim.Adam(getattr(self, name).parameters(), lr=0.01)
                for name in ("world", "actor", "critic")}

    def training_step(self, batch: Any, optim: Optimization) -> dict[str, Any]:
        x, y = batch
        latent = self.world(x)
        self.seen_dtypes.append(latent.dtype)
        optim.step("world", (latent - y).pow(2).mean())
        latent = latent.detach()
        action = torch.tanh(self.actor(latent))
        value = self.critic(torch.cat([latent, action], dim=1))
        # The actor climbs the critic's value; its backward pass must not leave gradients on
        # the critic (whose own gradients may be accumulating).
        optim.step("actor", -value.mean())
        value = self.critic(torch.cat([latent, action.detach()], dim=1))
        optim.step("critic", (value - 1).pow(2).mean())
        self.log("value", value.detach().float().mean())
        return {}

    def policy(self, device: torch.device) -> Policy:
        raise NotImplementedError


def test_three_optimizers_in_sequence_accumulate_and_clip_like_one_big_batch() -> None:
    k, batch = 3, 8
    accumulating, single = ThreePartAgent(), ThreePartAgent()
    clip = dict(gradient_clip_val=0.05, gradient_clip_algorithm="norm", on_nan_loss="raise")
    acc_optim = Optimization(accumulating.configure_optimizers(), progress=Progress(),
                             settings=OptimizationSettings(accumulate_grad_batches=k,
                                                           **clip))  # type: ignore[arg-type]
    one_optim = Optimization(single.configure_optimizers(), progress=Progress(),
                             settings=OptimizationSettings(**clip))  # type: ignore[arg-type]
    before = copy.deepcopy(single.state_dict())
    generator = torch.Generator().manual_seed(0)
    for _ in range(4):
        x, y = torch.randn(k * batch, 3, generator=generator), torch.randn(k * batch, 4,
                                                                         generator=generator)
        for xi, yi in zip(x.split(batch), y.split(batch), strict=True):
            acc_optim.training_step(accumulating, (xi, yi))
        one_optim.training_step(single, (x, y))
        for (name, pa), pb in zip(accumulating.named_parameters(), single.parameters(),
                                  strict=True):
            assert torch.allclose(pa, pb, atol=1e-5), name
    for name, value in single.state_dict().items():  # all three learned
        assert not torch.allclose(value, before[name]), name


def test_logged_values_join_the_training_step_metrics_once() -> None:
    agent = ThreePartAgent()
    optim = Optimization(agent.configure_optimizers(), progress=Progress())
    metrics = optim.training_step(agent, (torch.randn(4, 3), torch.randn(4, 4)))
    assert set(metrics) == {"value"} and isinstance(metrics["value"], torch.Tensor)
    assert agent.pop_logged() == {}  # drained by the training step


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_runs_the_forward_pass_in_low_precision_and_keeps_float32_weights(
        dtype: torch.dtype) -> None:
    agent = ThreePartAgent()
    optim = Optimization(agent.configure_optimizers(), progress=Progress(),
                         settings=OptimizationSettings(dtype=dtype, on_nan_loss="raise"))
    before = agent.world.weight.detach().clone()
    for _ in range(3):
        optim.training_step(agent, (torch.randn(8, 3), torch.randn(8, 4)))
    assert agent.seen_dtypes == [dtype] * 3
    assert all(p.dtype == torch.float32 for p in agent.parameters())
    assert all(p.grad is None for p in agent.parameters())  # zeroed after each step
    assert not torch.equal(agent.world.weight, before)


def test_float16_loss_scalers_are_saved_and_restored() -> None:
    agent = ThreePartAgent()
    optim = Optimization(agent.configure_optimizers(), progress=Progress(),
                         settings=OptimizationSettings(dtype=torch.float16, on_nan_loss="raise"))
    optim.training_step(agent, (torch.randn(8, 3), torch.randn(8, 4)))
    state = optim.state_dict()
    assert set(state["scalers"]) == {"world", "actor", "critic"}
    restored = Optimization(ThreePartAgent().configure_optimizers(), progress=Progress(),
                            settings=OptimizationSettings(dtype=torch.float16, on_nan_loss="raise"))
    restored.load_state_dict(state)
    assert restored.state_dict()["scalers"] == state["scalers"]


def test_an_unknown_dtype_is_refused() -> None:
    agent = ThreePartAgent()
    with pytest.raises(ValueError, match=r"float32.*bfloat16.*float16"):  # checked once, here
        Optimization(agent.configure_optimizers(), progress=Progress(),
                     settings=OptimizationSettings(dtype=torch.float64, on_nan_loss="raise"))


# ------------------------------------------------------------- losses checked on the device


def device_checked(on_nan_loss: str = "stop", fused: bool = True
                   ) -> tuple[Optimization, nn.Linear, Any]:
    from rltrain.runtime.interrupt import Interrupter

    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.1, fused=fused)
    interrupter = Interrupter()
    optim = Optimization({"m": opt}, progress=Progress(), interrupter=interrupter,
                         settings=OptimizationSettings(on_nan_loss=on_nan_loss,
                                                        # type: ignore[arg-type]
                                                       check_on_device=True))
    return optim, model, interrupter


def test_a_non_finite_loss_checked_on_the_device_is_skipped_without_reading_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import rltrain.optim.optimization as optim_module

    def no_host_read(loss: torch.Tensor) -> bool:
        raise AssertionError("the loss was read on the host")

    monkeypatch.setattr(optim_module, "_finite", no_host_read)
    optim, model, interrupter = device_checked()
    before = copy.deepcopy(model.state_dict())
    x = torch.randn(4, 3)
    assert optim.step("m", model(x).sum() * float("nan"))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # skipped
    state = next(iter(optim.optimizers["m"].state.values()))
    assert float(state["step"]) == 0  # the kernel undid its own step count
    assert not interrupter.stop_requested()  # nothing read yet
    optim.step("m", model(x).sum())  # a finite loss before the poll is applied
    assert not torch.equal(before["weight"], model.weight.detach())
    optim.poll()  # one read for the flags since the last poll
    assert interrupter.stop_requested() and "'m' loss was not finite" in interrupter.reason
    assert optim.non_finite_loss is not None


def test_a_clean_poll_changes_nothing_and_raise_raises_at_the_poll() -> None:
    optim, model, interrupter = device_checked()
    optim.step("m", model(torch.randn(2, 3)).sum())
    optim.poll()
    assert not interrupter.stop_requested() and optim.non_finite_loss is None
    optim, model, _ = device_checked("raise")
    optim.step("m", model(torch.randn(2, 3)).sum() * float("inf"))
    with pytest.raises(FloatingPointError, match="not finite"):
        optim.poll()


def test_an_optimizer_that_is_not_fused_is_checked_on_the_host() -> None:
    optim, model, interrupter = device_checked(fused=False)
    assert not optim.step("m", model(torch.randn(2, 3)).sum() * float("nan"))
    assert interrupter.stop_requested()  # at once, without a poll


# The fused Adam step without Optimizer.step's wrapper -----------------------------------------


def twin_adams(**kwargs: Any) -> tuple[nn.Module, torch.optim.Adam, nn.Module, torch.optim.Adam]:
    torch.manual_seed(0)
    a = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2))
    b = copy.deepcopy(a)
    return (a, torch.optim.Adam(a.parameters(), lr=1e-2, fused=True, **kwargs),
            b, torch.optim.Adam(b.parameters(), lr=1e-2, fused=True, **kwargs))


@pytest.mark.parametrize("kwargs", [{}, {"amsgrad": True, "weight_decay": 0.1},
                                    {"betas": (0.5, 0.9), "maximize": True}])
def test_the_functional_fused_adam_step_equals_optimizer_step_bit_for_bit(
        kwargs: dict[str, Any]) -> None:
    a, opt_a, b, opt_b = twin_adams(**kwargs)
    stepped_directly = []
    for step in range(6):
        if step == 3:  # a schedule's new rate applies from the next step
            for opt in (opt_a, opt_b):
                opt.param_groups[0]["lr"] = 3e-3
        x = torch.randn(5, 3)
        for net in (a, b):
            net(x).pow(2).sum().backward()
        opt_a.step()
        stepped_directly.append(fused_adam_step(opt_b))
        if not stepped_directly[-1]:
            opt_b.step()
        for opt in (opt_a, opt_b):
            opt.zero_grad()
    assert stepped_directly == [False] + [True] * 5  # the first step creates the state
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    state_a, state_b = opt_a.state_dict()["state"], opt_b.state_dict()["state"]
    for key in state_a:
        assert all(torch.equal(state_a[key][k], state_b[key][k]) for k in state_a[key])


def test_the_functional_step_leaves_other_optimizers_and_hooked_ones_to_step() -> None:
    model = nn.Linear(3, 1)
    model(torch.randn(2, 3)).sum().backward()
    assert not fused_adam_step(torch.optim.Adam(model.parameters(), fused=False))
    assert not fused_adam_step(torch.optim.SGD(model.parameters(), lr=0.1))
    hooked = torch.optim.Adam(model.parameters(), fused=True)
    hooked.step()
    calls: list[int] = []
    hooked.register_step_post_hook(lambda *_: calls.append(1))
    assert not fused_adam_step(hooked)  # its hook must run: step() does that
    assert calls == []
