"""A small training script with two bugs, examined by the clinic (README, "The clinic")."""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainclinic as tc

torch.manual_seed(0)
x = torch.randn(512, 8)
y = x @ torch.randn(8) + 0.1 * torch.randn(512)  # targets of shape (512,)
train = DataLoader(TensorDataset(x[:384], y[:384]), batch_size=32, shuffle=True)
val_x, val_y = x[384:], y[384:]

model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 1))  # outputs (N, 1)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_fn = nn.MSELoss()


def validate(model):
    model.eval()
    loss = loss_fn(model(val_x).squeeze(1), val_y)  # no torch.no_grad()
    model.train()
    return loss.item()


report = tc.clinic.examine(model, train, loss_fn, optimizer, validate=validate)
print(report)
