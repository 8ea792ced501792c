"""Regenerate the committed evaluation suites: ``python -m core_env.suites``.

Writes ``core_env/data/suites/{task_set}__{load}.npz`` (10 roots × 4 episodes each, on the corpus's eval
curves) and their sha256 manifest; the files come out byte-identical from the same corpus and code.
"""

from core_env.workload import write_suites

if __name__ == "__main__":
    for name, digest in write_suites().items():
        print(f"{digest}  {name}")
