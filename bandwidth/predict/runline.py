"""``measure.py --predict``: the model's step for the job that just ran (its own hosts, its rate),
beside the measured one, with the model's stated error (``benchmarks/predict_check.py``)."""

from __future__ import annotations

from bandwidth.arrays.dtypes import DTYPE_BYTES
from bandwidth.hardware.linksummary import timeouts_in_all
from bandwidth.predict import params as paramfile
from bandwidth.predict.cli import error_text
from bandwidth.predict.jobs import make_job
from bandwidth.predict.model import incast_words, predict

UNDER_PCT = 10.0       # the model this far below the run: what it leaves out is named


def predicted_lines(result, rate_bits: int) -> list[str]:
    """Notes for the summary (no hosts known, as under --backend mxnet: one note saying so)."""
    if not result.worker_hosts:
        return ["--predict: this backend does not report the job's hosts; nothing predicted"]
    if len(set(result.worker_hosts) | set(result.server_hosts)) < 2:
        return ["--predict: every process ran on one host, so no byte crossed a link and the "
                "model (of links) has nothing to predict"]
    plan = result.plan
    config = plan.config
    job = make_job(config.kv_store, plan.shapes, len(result.worker_hosts),
                   len(result.server_hosts), rate_bits=rate_bits,
                   in_flight=config.max_in_flight, ranks_per_worker=plan.devices.n,
                   element_size=DTYPE_BYTES[config.dtype],
                   placed=(tuple(result.worker_hosts), tuple(result.server_hosts)),
                   server_keys=config.server_keys, server_takes=config.server_takes)
    params = paramfile.load()
    found = predict(job, params)
    measured = result.summary.seconds_median
    error = 100 * (found.seconds - measured) / measured
    why = incast_words(found, params)
    return [f"predicted (python -m bandwidth.predict, parameters: {params.source}): "
            f"{found.seconds:.6f} s per step, binding: {found.binding}"
            f"{f' ({why})' if why else ''}; this run "
            f"{measured:.6f} s, error {error:+.1f} %{_left_out(result, error)}; the model's "
            f"error: {error_text(params.check)}"]


def _left_out(result, error: float) -> str:
    """Where the model fell short of the run by more than UNDER_PCT and the run's hosts waited
    out retransmission timeouts (hardware.linkcounters), the words that say the model has no
    term for them; "" otherwise."""
    stalls = timeouts_in_all(result.link_counters or {})
    if error > -UNDER_PCT or not stalls:
        return ""
    return (f" (the model has no term for the retransmission timeouts this run's hosts waited "
            f"out: {stalls[0]:.1f} per step in all, {stalls[1]:,.0f} ms or more each)")
