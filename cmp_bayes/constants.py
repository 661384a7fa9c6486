"""Constants shared across the package: one place for each convention."""

from __future__ import annotations

from typing import Final

#: Interval probability used by every summary, plot and report (ArviZ 1 defaults to 0.89).
CI_PROB: Final[float] = 0.90
#: Interval kind used by every summary: equal-tailed.
CI_KIND: Final[str] = "eti"

#: Identification statuses, from the exposure design (never from the posterior).
IDENTIFIED: Final[str] = "identified"
RETRIEVED_ONLY: Final[str] = "retrieved-only"
UNIDENTIFIED: Final[str] = "unidentified"
STATUSES: Final[tuple[str, ...]] = (IDENTIFIED, RETRIEVED_ONLY, UNIDENTIFIED)

#: Slot sources allowed by the log spec.
RETRIEVER: Final[str] = "retriever"
EXPOSURE: Final[str] = "exposure"
SOURCES: Final[tuple[str, ...]] = (RETRIEVER, EXPOSURE)

#: Default output folders of the CLI, relative to the working directory.
MODELS_DIR: Final[str] = "models"
REPORTS_DIR: Final[str] = "reports"

#: Sampler-health thresholds (arviz_stats.diagnose's defaults, after Vehtari et al. 2021 and
#: Betancourt 2016). A value passes when it is on the allowed side or equal: R-hat <= RHAT_MAX,
#: E-BFMI >= BFMI_MIN, ESS >= ESS_PER_CHAIN * chains, divergent share <= MAX_DIVERGENCE_SHARE.
RHAT_MAX: Final[float] = 1.01
#: Hyperparameter R-hat up to which decide still forgets where every chain agrees
#: (``Costs.max_rhat_chainwise``): chains that have not mixed on a hyperparameter, but
#: not so far apart that they sample different models.
RHAT_CHAINWISE_MAX: Final[float] = 1.1
BFMI_MIN: Final[float] = 0.3
ESS_PER_CHAIN: Final[int] = 100
#: Any divergent transition fails: a divergence marks a region the sampler could not enter.
MAX_DIVERGENCE_SHARE: Final[float] = 0.0

#: The posterior group (and its variable) holding each exposed memory's tau pmf on the grid
#: under the alternative priors that decide's prior-sensitivity check reads.
PRIOR_SENSITIVITY_GROUP: Final[str] = "prior_sensitivity"
PRIOR_SENSITIVITY_VAR: Final[str] = "tau_pmf"
#: The same group's variable holding each alternative's log-likelihood ratio against the fit.
PRIOR_LOG_RATIO_VAR: Final[str] = "log_likelihood_ratio"
#: An alternative whose log-likelihood ratio is below this (a ratio under 1/20, "strong"
#: evidence against it on Kass and Raftery's 1995 scale) is one the data rule out: it may
#: not flip a forget. Measured on the robustness logs: twice the odds that a memory
#: matters lost 6.4 nats on distraction-harm seed 1 (g-model fit) and flipped 140 of the
#: 188 flagged forgets at threshold 0.05, one of them of a truly useful memory; a null
#: twice as wide gained 0.8 nats there and stays an alternative.
PRIOR_LOG_RATIO_FLOOR: Final[float] = -2.995732273553991  # -log(20)
