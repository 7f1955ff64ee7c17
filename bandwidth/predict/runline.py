"""``measure.py --predict``: the model's step for the job that just ran (its own hosts, its rate),
beside the measured one, with the model's stated error (``benchmarks/predict_check.py``)."""

from __future__ import annotations

from bandwidth.plan.layout import DTYPE_BYTES
from bandwidth.predict import params as paramfile
from bandwidth.predict.cli import error_text
from bandwidth.predict.jobs import make_job
from bandwidth.predict.model import incast_words, predict


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
                   server_keys=config.server_keys)
    params = paramfile.load()
    found = predict(job, params)
    measured = result.summary.seconds_median
    error = 100 * (found.seconds - measured) / measured
    why = incast_words(job, params, found.binding)
    return [f"predicted (python -m bandwidth.predict, parameters: {params.source}): "
            f"{found.seconds:.6f} s per step, binding: {found.binding}"
            f"{f' ({why})' if why else ''}; this run "
            f"{measured:.6f} s, error {error:+.1f} %; the model's error: "
            f"{error_text(params.check)}"]
