"""What tools/torch_gpt.py and tools/torch_resnet.py share: the thread and
denormal settings of ug-bench's CPU runs, and the timing of a step function
after a warm-up, printed as the one line ug-bench reads ("VERSION MS")."""
import sys
import time

import torch


def setup():
    """THREADS [SECONDS] from the command line; the threads set, denormals
    flushed (as the CPU backend's threads do) and the seed fixed."""
    threads = int(sys.argv[1])
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)
    torch.manual_seed(0)
    return seconds


def report(step, seconds, warmup, least):
    """step(i) warmup times, then at least `least` times and for about
    `seconds`: prints the version and the milliseconds per step."""
    for i in range(warmup):
        step(i)
    steps, start = 0, time.perf_counter()
    while steps < least or time.perf_counter() - start < seconds:
        step(steps)
        steps += 1
    print(f"{torch.__version__} {(time.perf_counter() - start) * 1000.0 / steps:.3f}", flush=True)
