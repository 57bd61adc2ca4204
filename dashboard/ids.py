"""Component ids, kept in one place so layouts, callbacks and tests agree.

Each page owns a block of ids prefixed with its name; shell ids belong to the app frame.
"""

# -- shell (dashboard/app.py) --------------------------------------------------------
URL = "shell-url"
NAV = "shell-nav"

# -- overview page (dashboard/pages/overview.py) --------------------------------------
OVERVIEW_REFRESH = "overview-refresh"  # dcc.Interval
OVERVIEW_UPDATED = "overview-updated"  # "updated 12:00:05 UTC" line
OVERVIEW_FLOOR_MAP = "floor-map"  # dcc.Graph

#: Headline cards: key of warehouse.queries.overview.headline()-derived card -> ids.
OVERVIEW_CARDS = ("gpus", "allocated", "util", "power", "lost", "energy", "alerts")
OVERVIEW_ALERTS = "overview-alerts"  # list of active alerts


def card_value(key: str) -> str:
    """Id of a headline card's big number."""
    return f"overview-card-{key}-value"


def card_note(key: str) -> str:
    """Id of a headline card's small note under the number."""
    return f"overview-card-{key}-note"

# -- shared by every page (dashboard/components.py, filters.py, drilldown.py) ---------
FILTERS = "filters-store"  # dcc.Store: the page's Filters (from its URL)
FILTER_RANGE = "filter-range"
FILTER_WEEK = "filter-week"  # ISO week picker, shown with range "week"
FILTER_DAYS = "filter-days"  # DatePickerRange, shown with range "custom"
FILTER_PARTITION = "filter-partition"
FILTER_RACK = "filter-rack"
USER = "shell-user"  # who is logged in, with a log-out link
CLUSTER = "shell-cluster"  # the cluster.name setting, in the header
FLOOR_METRIC = "floor-metric"  # radio: temp | util | power
DRILL_CRUMBS = "drill-crumbs"  # breadcrumb: Fleet > rack > node
DRILL_RACK = "drill-rack"  # dcc.Graph: the selected rack's nodes x GPUs
DRILL_NODE = "drill-node"  # table: the selected node's GPUs and their jobs

# -- utilisation page (dashboard/pages/utilization.py) ---------------------------------
UTIL_OVER_TIME = "util-over-time"
UTIL_BY = "util-by"
UTIL_BY_KEY = "util-by-key"  # radio: rack | partition | user | job_type
UTIL_JOB_DIST = "util-job-dist"
UTIL_IDLE = "util-idle"  # table of allocated-but-idle GPUs
UTIL_TENSOR = "util-tensor"  # table: tensor-core activity per job or user
UTIL_TENSOR_BY = "util-tensor-by"  # radio: job | user

# -- thermal page (dashboard/pages/thermal.py) -----------------------------------------
THERMAL_FLOOR = "thermal-floor"
THERMAL_RACK_TEMPS = "thermal-rack-temps"
THERMAL_THROTTLE = "thermal-throttle"
THERMAL_EVENTS = "thermal-events"
THERMAL_ALERTS = "thermal-alerts"
ALERT_ACK = "alert-ack"  # pattern-matching button id: {"type": ALERT_ACK, "alert": id}
ALERT_SILENCE = "alert-silence"
THERMAL_ALERT_MSG = "thermal-alert-msg"
# the Thermal page's rule tuner (issue 22)
TUNER_RULE = "tuner-rule"
TUNER_DAYS = "tuner-days"
TUNER_FIELD = "tuner-field"  # prefix: tuner-field-threshold, tuner-field-hold_s, ...
TUNER_RUN = "tuner-run"
TUNER_SAVE = "tuner-save"
TUNER_JOB = "tuner-job"
TUNER_POLL = "tuner-poll"
TUNER_STATUS = "tuner-status"
TUNER_RESULT = "tuner-result"
TUNER_SAVE_MSG = "tuner-save-msg"
TUNER_CURRENT = "tuner-current"

# -- jobs pages (dashboard/pages/jobs.py, job.py) --------------------------------------
JOBS_QUERY = "jobs-query"
JOBS_USER = "jobs-user"
JOBS_STATE = "jobs-state"
JOBS_TABLE = "jobs-table"
JOB_ID = "job-id-store"
JOB_SUMMARY = "job-summary"
JOB_TIMELINE = "job-timeline"
JOB_TELEMETRY = "job-telemetry"
JOB_ENERGY = "job-energy"
JOB_FAILURES = "job-failures"

# -- analytics pages (failures.py, goodput.py, energy.py) -----------------------------
FAIL_RACK_DAY = "failures-rack-day"
FAIL_CATEGORY_WEEK = "failures-category-week"
FAIL_REASONS = "failures-reasons"
FAIL_XIDS = "failures-xids"
GOODPUT_RATE_CARDS = "goodput-rate-cards"
FAIL_LEMONS = "failures-lemons"
FAIL_CATEGORY = "failures-category"  # which failure categories the charts count
FAIL_TEMPERATURE = "failures-temperature"
GOODPUT_LOST = "goodput-lost"
GOODPUT_ETTR = "goodput-ettr"
GOODPUT_RATE = "goodput-rate"
GOODPUT_MTTF = "goodput-mttf"
GOODPUT_RATE_STORE = "goodput-rate-store"  # the rate behind the cards, for the advisor
GOODPUT_ADV_GPUS = "goodput-advisor-gpus"
GOODPUT_ADV_RESTART = "goodput-advisor-restart"
GOODPUT_ADVICE = "goodput-advice"
ENERGY_OVER_TIME = "energy-over-time"
ENERGY_TOTALS = "energy-totals"  # headline cards of the window
ENERGY_BY = "energy-by"
ENERGY_BY_KEY = "energy-by-key"
ENERGY_PUE = "energy-pue"
ENERGY_FAILURES = "energy-failures"
ENERGY_IDLE = "energy-idle"
ENERGY_GOODPUT = "energy-goodput"  # carbon per productive GPU-hour (issue 21)
ENERGY_GOODPUT_KEY = "energy-goodput-key"

# -- node page (dashboard/pages/node.py) -----------------------------------------------
NODE_NAME = "node-name-store"  # dcc.Store: the node of the page's URL
NODE_SUMMARY = "node-summary"
NODE_GPUS = "node-gpus"
NODE_RUNS = "node-runs"
NODE_EVENTS = "node-events"
NODE_ALERTS = "node-alerts"

# -- placement page (dashboard/pages/placement.py) -------------------------------------
PLACEMENT_CARDS = "placement-cards"  # headline cards of the window's placement
PLACEMENT_NOW_CARDS = "placement-now-cards"  # headline cards of fragmentation now
PLACEMENT_FRAG = "placement-frag"  # dcc.Graph: fragmentation over time
PLACEMENT_SCORES = "placement-scores"  # dcc.Graph: score of each multi-node run
PLACEMENT_JOBS = "placement-jobs"  # table: runs spread more than needed
PLACEMENT_WAITS = "placement-waits"  # table: large jobs waiting while GPUs were scattered

# -- reports page (dashboard/pages/reports.py) -----------------------------------------
REPORTS_LIST = "reports-list"


def refresh(page: str) -> str:
    """Id of a live page's dcc.Interval (``overview-refresh``)."""
    return f"{page}-refresh"


def updated(page: str) -> str:
    """Id of a page's "Updated 12:00:05 UTC" line (``overview-updated``)."""
    return f"{page}-updated"
