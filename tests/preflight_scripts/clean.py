import torch
from torch import nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.lstm = nn.LSTM(8, 16, batch_first=True)
        self.qkv = nn.Linear(16, 48)
        self.norm = nn.LayerNorm(16)
        self.embed = nn.Embedding(10, 16)
        self.head = nn.Linear(16, 4)

    def forward(self, x, tokens):
        x = F.gelu(self.bn(self.conv(x)))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        seq, _ = self.lstm(x.unsqueeze(1).expand(-1, 6, -1).contiguous())
        seq = seq + self.embed(tokens)
        q, k, v = self.qkv(self.norm(seq)).chunk(3, -1)
        att = F.scaled_dot_product_attention(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1), is_causal=True)
        return self.head(F.dropout(att.squeeze(1).mean(1), 0.1))


torch.manual_seed(0)
model = Net()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(3):
    x, tokens, y = torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4, 6)), torch.randint(0, 4, (4,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x, tokens), y, label_smoothing=0.1)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
