"""Read every shard's part.csv and write the count and mean of the squared values."""

import glob
import os

inputs = os.environ["K8SJOBS_INPUTS"]
values = []
for path in sorted(glob.glob(os.path.join(inputs, "parts-*", "part.csv"))):
    with open(path) as part:
        values += [float(line.split(",")[1]) for line in part]
summary = f"rows={len(values)} mean_square={sum(values) / len(values):.4f}\n"
with open(os.path.join(os.environ["K8SJOBS_WORKDIR"], "summary.txt"), "w") as out:
    out.write(summary)
print(summary, end="")
