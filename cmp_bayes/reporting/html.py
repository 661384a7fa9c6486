"""``report(posterior, out_dir)``: one self-contained HTML page and its Markdown twin.

The page is a Jinja2 template (``templates/report.html``) with every figure
embedded as a base64 PNG data URI and inline CSS in system fonts: no CDN, no
web font, no script, so it opens offline and can be mailed as one file.
``summary.md`` carries the same sections (tables and numbers; figures are
named, not embedded). Both files are written atomically.
"""

from __future__ import annotations

import datetime as dt
import html as html_lib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import xarray as xr

from cmp_bayes.atomic import write_text_atomic
from cmp_bayes.constants import CI_KIND, CI_PROB
from cmp_bayes.errors import CmpBayesError, PosteriorError
from cmp_bayes.posterior.health import sampler_health
from cmp_bayes.posterior.io import as_posterior

if TYPE_CHECKING:
    from cmp_bayes.decision.decisions import Decisions

#: File names inside the report folder.
INDEX_HTML: str = "index.html"
SUMMARY_MD: str = "summary.md"


def report(
    posterior: xr.DataTree | str | Path,
    out_dir: str | Path,
    decisions: Decisions | None = None,
    costs: Any = None,
    log: Any = None,
) -> Path:
    """Write the diagnostic report of a posterior.

    Parameters
    ----------
    posterior : xarray.DataTree or path
        A posterior following the contract (docs/model.md, "Posterior contract"), or a NetCDF
        file holding one (read with ``cmp_bayes.posterior.io.load_posterior``).
    out_dir : str or Path
        Folder for ``index.html`` and ``summary.md`` (created; other files in it
        are left alone).
    decisions : Decisions, optional
        What ``cmp_bayes.decide`` returned. Computed here with ``costs``
        (default ``Costs()``) when omitted and the decide module is installed.
    costs : cmp_bayes.decision.costs.Costs, optional
        Costs used when ``decisions`` is computed here. The sampler-health
        section grades with the R-hat and divergence thresholds of the costs
        behind the decisions (``decisions.costs``, else ``costs``, else the
        package defaults), so it gives the verdict that gated the forgets.
    log : ExposureLog, optional
        The log the posterior was fitted to: its memories file gives the
        memory texts when the posterior has no ``memory_text`` coordinate
        (posteriors fitted before it existed). Every table row that names a
        memory shows the first 60 characters of its text when either has them.

    Returns
    -------
    pathlib.Path
        Path of the written ``index.html``.

    Raises
    ------
    PosteriorError
        The posterior lacks the ``posterior`` group.
    """
    from cmp_bayes.progress import track
    from cmp_bayes.reporting import actions, checks
    from cmp_bayes.reporting import sections as sec
    from cmp_bayes.reporting.blocks import identification_frame
    from cmp_bayes.text import add_text

    tree = as_posterior(posterior)
    if not isinstance(tree, xr.DataTree) or "posterior" not in tree.children:
        raise PosteriorError("cannot report: the posterior has no 'posterior' group")
    out_dir = Path(out_dir)
    note = ""
    if decisions is None:
        decisions, note = _decide(tree, costs)
    gate = decisions.costs if decisions is not None else costs
    thresholds: dict[str, Any] = (
        {}
        if gate is None
        else {
            "max_rhat": gate.max_rhat,
            "max_divergence_share": gate.max_divergence_share,
            "estimand": gate.estimand,  # the verdict decide gave, for the same estimand
        }
    )
    health = sampler_health(tree, **thresholds)
    hyper = health.hyperparameters
    texts = _texts(tree, log)
    # memory rows everywhere (forest, unidentified list) show the start of the text
    ident = add_text(identification_frame(tree), texts)

    recommended, rec_note = _recommend(tree, decisions)
    steps = [
        lambda: sec.overview(
            health,
            ident,
            decisions,
            tree,
            recommended=recommended,
            recommend_note=rec_note,
            texts=texts,
            note=note,
        ),
        lambda: sec.sampler_health_section(health, _attempts(tree)),
        lambda: sec.hyperparameter_section(tree, hyper),
        lambda: sec.trace_rank_section(tree, hyper),
        lambda: sec.forest_section(tree, ident, threshold=_tau_threshold(gate)),
        lambda: sec.identification_section(tree, ident),
        lambda: checks.ppc_section(tree),
        lambda: actions.decisions_section(decisions, note, texts=texts),
        lambda: checks.loo_section(tree),
    ]
    # the sections draw the figures: a bar over them (cmp_bayes.progress) once they take a few seconds
    sections = [step() for step in track(steps, "writing the report", unit="sections", delay=3.0)]
    title = f"cmp_bayes report: {_name(tree, out_dir)}"
    generated = dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()
    version = str(tree.attrs.get("cmp_bayes_version", _version()))
    subtitle = (
        f"posterior of {tree.attrs.get('log_path', '?')} · created {tree.attrs.get('created_at', '?')}"
        f" · {health.chains} chains x {health.draws} draws"
    )
    page = _template().render(
        title=title,
        subtitle=subtitle,
        sections=sections,
        version=version,
        generated=generated,
        interval=f"{CI_PROB:.0%} {CI_KIND.upper()}",
    )
    write_text_atomic(out_dir / INDEX_HTML, page)
    write_text_atomic(out_dir / SUMMARY_MD, _markdown(title, subtitle, sections))
    return out_dir / INDEX_HTML


def _texts(tree: xr.DataTree, log: Any) -> pd.Series | None:
    """Memory texts: the posterior's ``memory_text``, else the log's memories file."""
    from cmp_bayes.posterior.provenance import memory_texts
    from cmp_bayes.text import texts_from_memories

    texts = memory_texts(tree)
    if texts is None and log is not None:
        texts = texts_from_memories(getattr(log, "memories", None))
    return texts


def _decide(tree: xr.DataTree, costs: Any) -> tuple[Decisions | None, str]:
    from cmp_bayes.decision.rule import decide

    try:
        return decide(tree, costs), ""
    except CmpBayesError as exc:
        return None, f"Not computed: {exc}"


def _tau_threshold(gate: Any) -> float | None:
    """The decision threshold to draw on the tau forest: the costs' when they decide on tau.

    Without costs the package default applies (``Costs().threshold``); a threshold
    on another estimand (utility, ...) is not a tau value, so none is drawn.
    """
    from cmp_bayes.decision.costs import Costs

    costs = gate if gate is not None else Costs()
    return float(costs.threshold) if costs.estimand == "tau" else None


#: Posterior draws per memory ``recommend_exposures`` may use in the report: its cost grows as
#: draws**2 per memory, so large stores get fewer (never under 20) and the page stays quick.
_RECOMMEND_WORK: float = 4e7


def _recommend(tree: xr.DataTree, decisions: Decisions | None) -> tuple[pd.DataFrame | None, str]:
    """``recommend_exposures`` under the decisions' costs, or None and why not."""
    from cmp_bayes.decision.recommend import recommend_exposures
    from cmp_bayes.reporting.actions import NEXT_POOL

    if decisions is None:
        return None, "Not computed: there are no decisions to improve on."
    todo = len(decisions) - int(decisions.counts()["forget"])
    if todo == 0:
        return None, "Nothing to expose: every memory is forgotten."
    draws = int(max(20, min(200, (_RECOMMEND_WORK / max(todo, 1)) ** 0.5)))
    try:
        table = recommend_exposures(
            tree, min(NEXT_POOL, todo), decisions.costs, draws=draws
        )
    except CmpBayesError as exc:
        return None, f"Not computed: {exc}"
    return table, ""


def _attempts(tree: xr.DataTree) -> list[dict[str, Any]]:
    """fit's recorded attempts ([] when absent or unreadable: the report shows what it can)."""
    from cmp_bayes.posterior.contract import fit_attempts

    try:
        return fit_attempts({str(k): v for k, v in tree.attrs.items()})
    except CmpBayesError:
        return []


def _name(tree: xr.DataTree, out_dir: Path) -> str:
    log_path = str(tree.attrs.get("log_path", "") or "")
    return Path(log_path).name if log_path else out_dir.name


def _template() -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("cmp_bayes.reporting", "templates"),
        autoescape=jinja2.select_autoescape(["html"]),
        undefined=jinja2.StrictUndefined,
    )
    return env.get_template("report.html")


def _markdown(title: str, subtitle: str, sections: list) -> str:
    parts = [f"# {title}\n\n{subtitle}\n"]
    for s in sections:
        # the anchor keeps the HTML page's section ids in the Markdown too
        parts.append(
            f'\n<a id="{html_lib.escape(s.id)}"></a>\n## {s.title}\n\n_{s.lead}_\n\n{s.markdown}'
        )
    return "".join(parts)


def _version() -> str:
    from cmp_bayes.version import __version__

    return __version__
