"""Run by `accelerate launch` from test_accelerate_multiprocess.py: accelerate's Accelerator on
"tpu" in each process, a tiny data-parallel training loop through
`accelerator.prepare`, and what it saw written to $TPUC_TEST_OUT/rank<RANK>.json."""
import json
import os

import torch
from accelerate import Accelerator

from tests.models.accelerate_common import STEPS, data, make_model

acc = Accelerator()
state = acc.state
torch.manual_seed(0)
model = make_model()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = data()
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=2, shuffle=False)
model, opt, loader = acc.prepare(model, opt, loader)
batches = []
for _ in range(STEPS):
    for xb, yb in loader:
        batches.append(xb.device.type)
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
params = [p.detach().cpu().tolist() for p in acc.unwrap_model(model).parameters()]
out = {"distributed_type": state.distributed_type.value, "num_processes": state.num_processes,
       "process_index": state.process_index, "device": str(acc.device), "backend": state.backend,
       "ddp": type(model).__name__, "batch_devices": sorted(set(batches)), "steps": len(batches),
       "params": params}
with open(os.path.join(os.environ["TPUC_TEST_OUT"], f"rank{state.process_index}.json"), "w") as f:
    json.dump(out, f)
