"""Pure figure builders: a DataFrame in, a ``plotly.graph_objects.Figure`` out.

One rule says where a builder lives: **the module named after the page that shows it**
(``dashboard/pages/<page>.py`` draws with ``dashboard/figures/<page>.py`` and reads
through ``warehouse/queries/<page>.py`` where that exists). ``base`` holds what every
figure shares (fonts, palettes, layouts, the empty figure, the line chart). A figure
shown on a second page, or in the weekly report, is imported from its home page's
module: the Thermal page draws ``figures.overview.floor_map``, the report draws
``figures.utilization.utilisation_over_time`` and ``figures.goodput.lost_over_time``.

No database, no Dash: the same builders draw the live pages and the weekly report.
"""
