"""Write 3,000 reproducible samples, one "index,value" line each."""

import os
import random

rng = random.Random(42)
with open(os.path.join(os.environ["K8SJOBS_WORKDIR"], "samples.csv"), "w") as out:
    for i in range(3000):
        out.write(f"{i},{rng.gauss(10.0, 2.0):.6f}\n")
print("wrote 3000 samples")
