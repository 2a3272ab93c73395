"""The actor worker that tests/test_verl.py runs in a Ray actor on the real TransferQueue (verl's venv only).

Stand-in for one piece only: the model. verl's ActorRolloutRefWorker.compute_log_prob/update_actor run a model
forward; here the "forward" returns logits the test chose (so that the loss can be checked against reco_mini on the
same logits). Everything around it is verl's own code: the worker methods are wrapped by verl's `tqbridge`, which
turns the KVBatchMeta handle into the TensorDict the worker sees (fetching only the fields the handle lists) and
writes compute_log_prob's output back to TransferQueue; FSDPEngineWithLMHead.prepare_model_inputs/outputs turn the
logits into log-probs, entropy and sum pi^2; the loss is the one the trainer sent through Ray (unpickled here).
"""
from __future__ import annotations

import json
from types import SimpleNamespace

import torch
import verl.utils.torch_functional as verl_F
from tensordict import TensorDict
from verl.utils import tensordict_utils as tu
from verl.utils.metric import Metric
from verl.utils.transferqueue_utils import tqbridge
from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

VERL_SUM_PI_SQUARED = verl_F.calculate_sum_pi_squared_from_logits  # as this process imported it


def stub_engine() -> FSDPEngineWithLMHead:
    """verl's FSDP engine class without a model, as verl's own CPU tests use it."""
    engine = FSDPEngineWithLMHead.__new__(FSDPEngineWithLMHead)
    engine.use_ulysses_sp, engine.pad_to_length = False, False
    engine.engine_config = SimpleNamespace(entropy_checkpointing=False, entropy_from_logits_with_chunking=False)
    engine.compute_entropy_from_logits = verl_F.entropy_from_logits
    return engine


def engine_outputs(micro_batch: TensorDict, logits: torch.Tensor) -> dict:
    """verl's FSDPEngineWithLMHead.prepare_model_inputs/prepare_model_outputs on packed logits [total_nnz, V]."""
    engine = stub_engine()
    _, output_args = engine.prepare_model_inputs(micro_batch)
    return engine.prepare_model_outputs(SimpleNamespace(logits=logits.unsqueeze(0)), output_args, micro_batch, None)


class LogitsActorWorker:
    """compute_log_prob and update_actor of verl's actor worker, the model replaced by given logits (module doc)."""

    def __init__(self):
        self.loss_fn, self.logits, self.seen = None, None, None

    def fresh_process(self) -> None:
        """Undo what an earlier test's loss installed, as if this were a new worker process."""
        verl_F.calculate_sum_pi_squared_from_logits = VERL_SUM_PI_SQUARED

    def set_loss_fn(self, loss_fn) -> bool:
        """As verl's worker: keep the loss Ray unpickled here; says whether verl's sum pi^2 is still verl's own."""
        self.loss_fn = loss_fn
        return verl_F.calculate_sum_pi_squared_from_logits is VERL_SUM_PI_SQUARED

    def set_logits(self, old: torch.Tensor, new: torch.Tensor) -> None:
        self.logits = {"old": old, "new": new}

    @tqbridge()
    def compute_log_prob(self, data: TensorDict) -> TensorDict:
        tu.assign_non_tensor(data, use_remove_padding=True)
        with torch.no_grad():
            out = engine_outputs(data, self.logits["old"])
        return TensorDict(out, batch_size=data.batch_size[0])  # tqbridge writes it to TransferQueue

    @tqbridge()
    def update_actor(self, data: TensorDict) -> dict:
        """One micro-batch holding the whole batch (dp_size 1), the loss and its gradient wrt the logits."""
        tu.assign_non_tensor(data, use_remove_padding=True, dp_size=1, batch_num_tokens=int(data["loss_mask"].values().sum()))
        logits = self.logits["new"].clone().requires_grad_(True)
        loss, metrics = self.loss_fn(model_output=engine_outputs(data, logits), data=data, dp_group=None)
        loss.backward()
        values = {k: float(v.aggregate()) if isinstance(v, Metric) else v for k, v in metrics.items()}
        self.seen = {"loss": loss.detach(), "grad": logits.grad, "data": data, "metrics": values,
                     "verl_sum_pi_squared": verl_F.calculate_sum_pi_squared_from_logits is VERL_SUM_PI_SQUARED}
        return {"metrics": {"mfu": [0.0], "pg_loss": [loss.item()]}}

    def last_update(self) -> dict:
        return self.seen


class RecordingLoss:
    """A loss that, in the worker process, appends each micro-batch's rows (input_ids) and the reco_weights they
    reach the loss with to a JSONL file, then returns the wrapped loss's result (tests/test_verl.py compares them
    with reco_mini's weights over the whole batch)."""

    def __init__(self, loss, path: str):
        self.loss, self.path = loss, path

    def __call__(self, model_output, data: TensorDict, dp_group=None):
        row = {"input_ids": [t.tolist() for t in data["input_ids"].unbind()], "weights": data["reco_weights"].tolist()}
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")
        return self.loss(model_output, data, dp_group)
