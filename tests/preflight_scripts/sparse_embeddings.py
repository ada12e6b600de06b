"""A recommender whose user and item tables take sparse gradients, as large embedding
tables often do, beside a frozen genre table (no gradient at all)."""

import torch
from torch import nn

import devicekit


class Recommender(nn.Module):
    def __init__(self):
        super().__init__()
        self.users = nn.Embedding(20, 8, sparse=True)
        self.items = nn.EmbeddingBag(30, 8, mode="mean", sparse=True)
        self.genres = nn.Embedding(5, 8, sparse=True).requires_grad_(False)
        self.head = nn.Linear(8, 1)

    def forward(self, user, history, offsets, genre):
        taste = self.users(user)  # <sparse-gradient>
        seen = self.items(history, offsets)  # <sparse-gradient>
        return self.head(taste * seen + self.genres(genre)).squeeze(1)


torch.manual_seed(0)
device = devicekit.device()
model = Recommender().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    user = torch.randint(0, 20, (4,)).to(device)
    history = torch.randint(0, 30, (12,)).to(device)
    offsets = torch.tensor([0, 3, 6, 9]).to(device)
    genre = torch.randint(0, 5, (4,)).to(device)
    rating = torch.rand(4).to(device)
    loss = (model(user, history, offsets, genre) - rating).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("trained on", device)
