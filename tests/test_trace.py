"""Trace-driven workloads (core_env.trace): layouts, the time-to-step mapping, recipe fill-in, episodes, bad files."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.rollout import run_agent, run_parallel_episode
from core_env import discrete_core_v1
from core_env.config import EnvConfig
from core_env.curves import bank_for
from core_env.recipe import DEFAULT_RECIPE, FamilyReference, draw_tasks, quantize
from core_env.trace import Trace, read_trace, trace_workload
from core_env.workload import Workload
from mara_agents.heuristics import EDF

# ElasticFlow layout with the spellings of ElasticFlow's README / add_job (submission_time, deadline,
# num_iteration); deliberately out of submission order, with a best-effort job (no deadline) on line 5.
ELASTICFLOW = """job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration,best_effort
0,100,5000,resnet50,1300,64,1,600,0
1,130,9000,charlm,1500,128,2,900,0
3,400,2000,vgg16,1000,64,1,300,0
2,250,4000,mlp_digits,99999,256,4,600,1
4,520,7000,bert,2000,128,1,1200,0
"""
# The same jobs in the spellings of ElasticFlow's shipped traces (submit_time, ddl, iteration).
ELASTICFLOW_SHIPPED = ELASTICFLOW.replace("submission_time", "submit_time").replace("deadline", "ddl").replace("num_iteration", "iteration")
BLOX = """job_id,num_gpus,submit_time,duration,model,batch_size
1,1,12,900,resnet50,64
2,1,16,1200,resnet50,128
3,1,72,300,DCGAN,128
4,2,115,600,resnet50,64
5,2,123,1500,PointNet,128
6,4,143,600,GPT2-Medium,32
"""
# Generic layout in steps: task 'c' has every field, 'b' only a deadline, 'd' a family, 'a' and 'e' nothing.
GENERIC = """task_id,arrival,deadline,target,rate,family
a,0,,,,
b,2,40,,,
c,2,30,0.5,12.5,mlp_wine
d,7,,,,mlp_digits
e,9,,,,
"""


@pytest.fixture(scope="module")
def bank():
    return bank_for("id", "train")


def write(tmp_path, text: str, name: str = "trace.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_generic_trace_in_steps_keeps_arrivals_and_present_fields(tmp_path, bank):
    trace = read_trace(write(tmp_path, GENERIC))
    assert isinstance(trace, Trace) and len(trace) == 5 and trace.unit == "step"
    assert (trace.step_seconds, trace.origin) == (1.0, 0.0)
    w = trace_workload(trace, bank, np.random.default_rng(0))
    assert isinstance(w, Workload) and len(w) == 5
    assert w.arrival.tolist() == [0, 2, 2, 7, 9] and w.arrival_steps == 10
    assert w.deadline[1] == 40 and w.deadline[2] == 30
    assert w.target[2] == 0.5 and w.batches_per_step[2] == 12.5
    assert bank.family[w.curve[2]] == "mlp_wine" and bank.family[w.curve[3]] == "mlp_digits"
    assert np.array_equal(w.demand, bank.demands(w.curve, w.target, w.batches_per_step))  # emerges as usual
    assert trace.line.tolist() == [2, 3, 4, 5, 6] and trace.job_id.tolist() == list("abcde")


def test_generic_trace_in_seconds_maps_arrivals_and_deadlines(tmp_path, bank):
    text = "task_id,arrival,deadline\nx,1000,1100\ny,1029,1029.5\nz,1030,1299.9\nq,1095,\n"
    trace = read_trace(write(tmp_path, text), step_seconds=30)
    assert trace.unit == "second" and trace.origin == 1000.0
    expected = [math.floor((t - 1000) / 30) for t in (1000, 1029, 1030, 1095)]
    assert trace.arrival.tolist() == expected == [0, 0, 1, 3]
    # floor((D - origin) / step_seconds); y's deadline falls inside its arrival step: arrival + 1
    assert trace.deadline.tolist() == [3, 1, 9, -1]
    w = trace_workload(trace, bank, np.random.default_rng(1))
    assert w.arrival.tolist() == expected and w.deadline[:3].tolist() == [3, 1, 9]
    shifted = read_trace(write(tmp_path, text), step_seconds=30, origin=970)
    assert shifted.arrival.tolist() == [1, 1, 2, 4]


@pytest.mark.parametrize("text", [ELASTICFLOW, ELASTICFLOW_SHIPPED], ids=["readme-names", "shipped-names"])
def test_elasticflow_trace(tmp_path, bank, text):
    trace = read_trace(write(tmp_path, text), layout="elasticflow")
    assert trace.step_seconds == 600 / DEFAULT_RECIPE.typical_run_steps == 10.0  # median duration ↦ a typical run
    assert trace.origin == 100.0 and trace.unit == "second"
    assert trace.job_id.tolist() == ["0", "1", "2", "3", "4"]  # sorted by submission time (stable)
    assert trace.line.tolist() == [2, 3, 5, 4, 6]
    assert trace.arrival.tolist() == [0, 3, 15, 30, 42]
    assert trace.deadline.tolist() == [120, 140, -1, 90, 190]  # absolute deadlines; best-effort job: none
    assert trace.family.tolist() == ["resnet50", "charlm", "mlp_digits", "vgg16", "bert"]
    assert trace.extra["num_gpu"].tolist() == ["1", "2", "4", "1", "1"]
    w = trace_workload(trace, bank, np.random.default_rng(2))
    assert w.arrival.tolist() == [0, 3, 15, 30, 42]
    assert w.deadline[[0, 1, 3, 4]].tolist() == [120, 140, 90, 190] and w.deadline[2] > 15
    # model names equal to bank families pin the curve's family; others are drawn over the whole bank
    assert bank.family[w.curve[1]] == "charlm" and bank.family[w.curve[2]] == "mlp_digits"


def test_blox_trace_draws_like_the_recipe(tmp_path, bank):
    trace = read_trace(write(tmp_path, BLOX), layout="blox")
    assert trace.step_seconds == 750 / 60 and trace.origin == 12.0  # median of the durations 300..1500
    expected = [math.floor((t - 12) / 12.5) for t in (12, 16, 72, 115, 123, 143)]
    assert trace.arrival.tolist() == expected and (trace.deadline == -1).all()
    w = trace_workload(trace, bank, np.random.default_rng(3))
    # no model name is a bank family and no deadline/target/rate is given: exactly draw_tasks's draws
    drawn = draw_tasks(bank, FamilyReference(bank, DEFAULT_RECIPE), 6, np.random.default_rng(3))
    assert np.array_equal(w.arrival, expected)
    assert np.array_equal(w.curve, drawn["curve"]) and np.array_equal(w.target, drawn["target"])
    assert np.array_equal(w.batches_per_step, drawn["batches_per_step"])
    assert np.array_equal(w.deadline, w.arrival + drawn["window"]) and np.array_equal(w.demand, drawn["demand"])


def test_missing_fields_are_reproducible_from_the_seed(tmp_path, bank):
    trace = read_trace(write(tmp_path, GENERIC))
    a, b = (trace_workload(trace, bank, np.random.default_rng(7)) for _ in range(2))
    for name in ("arrival", "deadline", "target", "batches_per_step", "curve", "demand"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    c = trace_workload(trace, bank, np.random.default_rng(8))
    assert np.array_equal(c.arrival, a.arrival)
    drawn = [0, 1, 3, 4]  # tasks without a trace target/rate
    assert not np.array_equal(c.target[drawn], a.target[drawn]) and not np.array_equal(c.curve[drawn], a.curve[drawn])
    assert c.target[2] == a.target[2] == 0.5 and c.deadline[1] == a.deadline[1] == 40  # trace values kept


def test_family_map_max_tasks_and_rate_from_duration(tmp_path, bank):
    trace = read_trace(write(tmp_path, ELASTICFLOW), layout="elasticflow")
    w = trace_workload(trace, bank, np.random.default_rng(4), family_map={"resnet50": "cnn_mnist1d", "bert": "mlp_wine"})
    assert bank.family[w.curve].tolist() == ["cnn_mnist1d", "charlm", "mlp_digits", bank.family[w.curve[3]], "mlp_wine"]
    with pytest.raises(ValueError, match="not families of bank"):
        trace_workload(trace, bank, np.random.default_rng(4), family_map={"bert": "no_such_family"})
    short = trace_workload(trace, bank, np.random.default_rng(4), max_tasks=2)
    assert len(short) == 2 and short.arrival_steps == 4
    derived = trace_workload(trace, bank, np.random.default_rng(4), rate_from_duration=True)
    reference = FamilyReference(bank, DEFAULT_RECIPE)
    fam = bank.family[derived.curve].tolist()
    expected = quantize(np.array([reference.rate[f] for f in fam]) * 60 / (trace.duration / trace.step_seconds))
    assert np.array_equal(derived.batches_per_step, expected)
    with pytest.raises(ValueError, match="max_tasks"):
        trace_workload(trace, bank, np.random.default_rng(4), max_tasks=0)


def test_an_edf_episode_runs_to_the_end(tmp_path, bank):
    w = trace_workload(read_trace(write(tmp_path, ELASTICFLOW), layout="elasticflow"), bank, np.random.default_rng(5))
    stats = run_agent(EDF(), [w], EnvConfig())
    assert not stats["truncated"][0] and stats["arrived"][0] == len(w)
    assert stats["completed"][0] + stats["failed"][0] + stats["rejected"][0] == len(w) and stats["active"][0] == 0
    env = discrete_core_v1.parallel_env()
    pz = run_parallel_episode(env, EDF(), options={"workload": w})  # the env's reset hook replays it
    assert pz["completed"] == stats["completed"][0] and pz["t"] == stats["t"][0]


BAD = {
    "missing column": ("elasticflow", "job_id,submission_time,model_name,duration\n0,0,bert,10\n", "needs column(s) 'deadline' or 'ddl'"),
    "non-numeric": ("generic", "task_id,arrival\na,0\nb,soon\n", "line 3: column 'arrival': 'soon' is not a number"),
    "empty value": ("blox", "job_id,num_gpus,submit_time,duration,model,batch_size\n1,1,,10,m,4\n", "line 2: column 'submit_time' is empty"),
    "non-finite": ("generic", "task_id,arrival,target\na,0,nan\n", "line 2: column 'target': 'nan' is not a finite number"),
    "negative time": ("generic", "task_id,arrival\na,3\nb,-1\n", "line 3: column 'arrival': submission time -1 is negative"),
    "deadline before arrival": ("elasticflow", "job_id,submit_time,model_name,ddl,duration\n0,50,bert,40,10\n",
                                "line 2: column 'ddl': deadline 40 is not later than the submission time 50"),
    "deadline at arrival": ("generic", "task_id,arrival,deadline\na,5,5\n", "line 2: column 'deadline': deadline 5 is not later"),
    "bad target": ("generic", "task_id,arrival,target\na,0,-0.5\n", "line 2: column 'target': target loss -0.5 must be > 0"),
    "bad rate": ("generic", "task_id,arrival,rate\na,0,0\n", "line 2: column 'rate': rate 0 must be in [1e-06, 1e+18]"),
    "tiny rate": ("generic", "task_id,arrival,rate\na,0,1e-300\n", "line 2: column 'rate': rate 1e-300 must be in [1e-06"),
    "bad duration": ("blox", "job_id,num_gpus,submit_time,duration,model,batch_size\n1,1,0,0,m,4\n", "line 2: column 'duration': duration 0 must be >= 0.001"),
    "tiny duration": ("blox", "job_id,num_gpus,submit_time,duration,model,batch_size\n1,1,0,1e-300,m,4\n2,1,5,1e-300,m,4\n",
                      "line 2: column 'duration': duration 1e-300 must be >= 0.001"),
    "arrival too late": ("generic", "task_id,arrival\na,0\nb,100000000\n", "line 3: submission time 1e+08 maps to step 1e+08, beyond the longest trace"),
    "duplicate job": ("generic", "task_id,arrival\na,0\nb,1\na,3\n", "line 4: job 'a' appears again (first on line 2)"),
    "wrong field count": ("generic", "task_id,arrival\na,0\nb,1,2\n", "line 3: 3 fields, but the header has 2"),
    "duplicate column": ("generic", "task_id,arrival,arrival\na,0,1\n", "duplicate column(s) ['arrival']"),
    "empty file": ("generic", "", "the file is empty"),
    "blank file": ("blox", "\n\n", "the file is empty"),
    "header only": ("generic", "task_id,arrival\n", "no job rows after the header"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_files_raise_naming_file_and_row(tmp_path, case):
    layout, text, message = BAD[case]
    path = write(tmp_path, text, "bad_trace.csv")
    with pytest.raises(ValueError) as error:
        read_trace(path, layout=layout)
    assert str(path) in str(error.value) and message in str(error.value), str(error.value)


def test_ordering_and_origin_errors(tmp_path):
    path = write(tmp_path, "task_id,arrival\na,4\nb,2\n", "unsorted.csv")
    assert read_trace(path).arrival.tolist() == [2, 4]
    with pytest.raises(ValueError, match=r"unsorted\.csv: line 3: submission time 2 is earlier than the previous row's 4"):
        read_trace(path, sort=False)
    with pytest.raises(ValueError, match=r"unsorted\.csv: line 3: submission time 2 is before the origin 3"):
        read_trace(path, origin=3)
    with pytest.raises(ValueError, match="unknown trace layout"):
        read_trace(path, layout="philly")
    with pytest.raises(ValueError, match="step_seconds"):
        read_trace(path, step_seconds=0)
