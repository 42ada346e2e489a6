#!/usr/bin/env python3
"""Train a small CNN classifier, the way a training script usually looks.

The data is torchvision's FakeData (random images, nothing to download), so
it runs anywhere; swap in your own dataset and model. What makes it a good
citizen on Tide:

- a model file per epoch in $TIDE_OUTPUT_DIR (downloadable with
  `tide outputs ID --get DIR`);
- a resumable checkpoint (model, optimizer, epoch, losses) in
  $TIDE_CHECKPOINT_DIR, written to a temporary name and renamed, so a
  preemption, a drain or a lost node costs at most the epoch in progress;
- one JSON line per epoch in $TIDE_METRICS_FILE (`tide metrics ID`);
- SIGTERM (Tide's notice) ends it quickly: the checkpoint of the last
  finished epoch is already saved.

Outside Tide it writes to ./out and ./checkpoint.
"""
import argparse
import json
import os
import signal
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torch.utils.data import DataLoader
from torchvision import transforms


class Net(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3)
        self.conv2 = nn.Conv2d(8, 16, 3)
        self.fc = nn.Linear(16 * 6 * 6, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)  # 32 -> 30 -> 15
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)  # 15 -> 13 -> 6
        return self.fc(torch.flatten(x, 1))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--images", type=int, default=256, help="size of the fake dataset")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epoch-sleep", type=float, default=0.0,
                   help="seconds to wait after each epoch (to watch it, or preempt it)")
    p.add_argument("--fail-first", type=int, default=0,
                   help="1: exit with code 3 after the first epoch of the first attempt")
    args = p.parse_args()

    out_dir = os.environ.get("TIDE_OUTPUT_DIR", "out")
    ckpt_dir = os.environ.get("TIDE_CHECKPOINT_DIR", "checkpoint")
    metrics_path = os.environ.get("TIDE_METRICS_FILE")
    attempt = int(os.environ.get("TIDE_ATTEMPT", "1"))
    os.makedirs(out_dir, exist_ok=True)
    os.makedirs(ckpt_dir, exist_ok=True)
    torch.manual_seed(args.seed)

    stopping = {"now": False}

    def on_term(signum, frame):
        stopping["now"] = True

    signal.signal(signal.SIGTERM, on_term)

    data = torchvision.datasets.FakeData(size=args.images, image_size=(3, 32, 32), num_classes=10,
                                         transform=transforms.ToTensor(), random_offset=args.seed)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    start_epoch, losses = 0, []
    ckpt = os.path.join(ckpt_dir, "checkpoint.pt")
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch, losses = state["epoch"], state["losses"]
        print(f"resumed from epoch {start_epoch} (attempt {attempt}, "
              f"{os.environ.get('TIDE_RESTART_REASON', '?')}), last loss {losses[-1]:.4f}", flush=True)
    metrics = open(metrics_path, "a") if metrics_path else None

    for epoch in range(start_epoch, args.epochs):
        # The same shuffle for an epoch on every attempt.
        loader = DataLoader(data, batch_size=args.batch_size, shuffle=True,
                            generator=torch.Generator().manual_seed(args.seed * 1000 + epoch))
        model.train()
        total, batches = 0.0, 0
        for images, labels in loader:
            if stopping["now"]:
                print(f"notice received during epoch {epoch + 1}: stopping", flush=True)
                return 0
            optimizer.zero_grad()
            loss = F.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()
            total += loss.item()
            batches += 1
        losses.append(total / batches)
        done = epoch + 1
        print(f"epoch {done}/{args.epochs} loss {losses[-1]:.4f}", flush=True)
        torch.save(model.state_dict(), os.path.join(out_dir, f"model-epoch{done}.pt"))
        tmp = ckpt + ".tmp"
        torch.save({"epoch": done, "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(), "losses": losses}, tmp)
        os.replace(tmp, ckpt)
        if metrics:
            metrics.write(json.dumps({"epoch": done, "step": done * batches, "loss": losses[-1],
                                      "lr": args.lr}) + "\n")
            metrics.flush()
        if args.fail_first and attempt == 1:
            print("failing on purpose after the first epoch of the first attempt", flush=True)
            return 3
        if args.epoch_sleep > 0 and done < args.epochs:
            time.sleep(args.epoch_sleep)

    torch.save(model.state_dict(), os.path.join(out_dir, "model.pt"))
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump({"epochs": args.epochs, "losses": losses}, f)
    print(f"trained {args.epochs} epochs, final loss {losses[-1]:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
