"""What every layer shares: the name rules, storage paths and clients, CPU counts, units, and the contracts between
the trainer, the steps and the server (the prepared data's schema, warmup records, progress lines, a quick exit).
Imports nothing of this project's other packages."""
