"""`python -m training.loop` / `torchrun ... -m training.loop`: the training entry point."""

from training.loop.train import main

raise SystemExit(main())
