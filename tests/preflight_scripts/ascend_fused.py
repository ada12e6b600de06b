"""An Ascend team's LLaMA-style block on torch_npu's fused operators (RMSNorm, rotary
embedding, fused attention in the BSND layout, SwiGLU), trained two steps with NpuFusedAdamW
under torch.npu.amp, as it runs on an NPU host. Its NPU-only branch, never taken here,
names an operator with a typo. Lines marked `# <name>` are read by
tests/test_preflight_npu_operators.py."""

import math

import torch
import torch_npu
from torch_npu import npu_swiglu
from torch_npu.optim import NpuFusedAdamW

BATCH, LENGTH, HEADS, HEAD_DIM = 2, 8, 2, 8
HIDDEN = HEADS * HEAD_DIM
STEPS = 2


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.Parameter(torch.ones(HIDDEN))
        self.qkv = torch.nn.Linear(HIDDEN, 3 * HIDDEN, bias=False)
        self.gate_up = torch.nn.Linear(HIDDEN, 4 * HIDDEN, bias=False)
        self.down = torch.nn.Linear(2 * HIDDEN, HIDDEN, bias=False)
        positions = torch.arange(LENGTH, dtype=torch.float32)
        inverse = 1.0 / 10000 ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM)
        angles = torch.cat([torch.outer(positions, inverse)] * 2, dim=-1)[None, :, None]
        self.register_buffer("cos", angles.cos())
        self.register_buffer("sin", angles.sin())
        self.register_buffer("causal", torch.ones(LENGTH, LENGTH).triu(1).bool())

    def forward(self, x):
        h = torch_npu.npu_rms_norm(x, self.norm, epsilon=1e-6)[0]  # <npu_rms_norm>
        q, k, v = self.qkv(h).view(BATCH, LENGTH, 3, HEADS, HEAD_DIM).unbind(2)
        q, k = torch_npu.npu_rotary_mul(q, self.cos, self.sin), torch_npu.npu_rotary_mul(k, self.cos, self.sin)  # <npu_rotary_mul>
        attention = torch_npu.npu_fusion_attention(  # <npu_fusion_attention>
            q, k, v, HEADS, "BSND", atten_mask=self.causal, scale=1 / math.sqrt(HEAD_DIM)
        )[0]
        h = h + attention.reshape(BATCH, LENGTH, HIDDEN)
        return h + self.down(npu_swiglu(self.gate_up(h), dim=-1))  # <npu_swiglu>


def main():
    torch.npu.set_device("npu:0")
    torch.manual_seed(0)
    model = Block().npu()
    optimizer = NpuFusedAdamW(model.parameters(), lr=1e-3)
    scaler = torch.npu.amp.GradScaler()
    x = torch.randn(BATCH, LENGTH, HIDDEN).npu()
    for _ in range(STEPS):
        optimizer.zero_grad()
        with torch.npu.amp.autocast():
            loss = model(x).float().pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    if False:  # on an NPU host only: the RMSNorm of the last hidden state, misspelt
        torch_npu.npu_rms_nrom(x, model.norm)  # <npu-operator>
    print(f"ascend_fused: trained {STEPS} steps on {x.device.type}")


main()
