"""`picoring report --csv`: the figures behind a report as CSV tables, for a spreadsheet or
pandas (`pandas.read_csv`), one file each (DIR/...):

  summary.csv   one row: the run, in `picoring compare --csv`'s columns (check/compare.py
                FIELDS), so rows of `report` and `compare` go into one sheet
  requests.csv  one row per request, in the order made (REQUEST_FIELDS)
  nodes.csv     one row per node (NODE_FIELDS)

Times are in the trace's unit, said in each row's time_unit column: `hop` (the simulator's
hop times) or `us` (boards: microseconds, host clock). A cell with nothing to say is empty
(the entry time of a request never served). Columns are documented in docs/trace-format.md.
"""

import csv
import os

from . import compare

REQUEST_FIELDS = ("request", "node", "t_request", "t_enter", "latency", "service_traffic", "service_logical",
                  "overtaken", "outcome", "time_unit")
NODE_FIELDS = ("node", "requested", "served", "mean_latency", "max_latency", "max_service_traffic", "time_unit")


def _write(path, fields, rows):
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(fields)
        w.writerows(["" if v is None else v for v in row] for row in rows)
    return path


def node_rows(series, unit):
    """Per node: requests made and served, mean and largest latency, largest service traffic."""
    n = series.n
    most_lat = [None] * n
    most_svc = [None] * n
    for row in series.requests:
        node, latency, service = row[1], row[4], row[5]
        if latency is not None:
            most_lat[node] = latency if most_lat[node] is None else max(most_lat[node], latency)
            most_svc[node] = service if most_svc[node] is None else max(most_svc[node], service)
    out = []
    for i in range(n):
        served = series.served_by_node[i]
        mean = round(series.latency_by_node[i] / served, 3) if served else None
        out.append((i, series.requests_by_node[i], served, mean, most_lat[i], most_svc[i], unit))
    return out


def write_tables(series, report, unit, out_dir):
    """Write the three tables of a run (plots.RunSeries, the checker's report) into out_dir;
    unit is the trace's time_unit ("hop" or "us"). Returns their paths."""
    with open(os.path.join(out_dir, "summary.csv"), "w", encoding="utf-8", newline="") as f:
        f.write(compare.to_csv([compare.row(report)]))
    paths = [os.path.join(out_dir, "summary.csv")]
    paths.append(_write(os.path.join(out_dir, "requests.csv"), REQUEST_FIELDS,
                        (row + [unit] for row in series.requests)))
    paths.append(_write(os.path.join(out_dir, "nodes.csv"), NODE_FIELDS, node_rows(series, unit)))
    return paths
