"""Summaries of listed records, in the shape of Ray's TaskSummaries and ActorSummaries (as plain dicts):

    tasks(rows)  -> {"summary": {"f": {"func_or_class_name": "f", "type": "NORMAL_TASK",
                                       "state_counts": {"FINISHED": 3}}, ...},
                     "total_tasks": 3, "total_actor_tasks": 0, "total_actor_scheduled": 0, "summary_by": "func_name"}
    actors(rows) -> {"summary": {"A": {"class_name": "A", "state_counts": {"ALIVE": 1}}}, "total_actors": 1,
                     "summary_by": "class"}
"""

_TOTALS = {"NORMAL_TASK": "total_tasks", "ACTOR_TASK": "total_actor_tasks",
           "ACTOR_CREATION_TASK": "total_actor_scheduled"}


def tasks(rows):
    summary = {}
    totals = {"total_tasks": 0, "total_actor_tasks": 0, "total_actor_scheduled": 0}
    for row in rows:
        key = row.get("name") or row.get("func_or_class_name")
        entry = summary.setdefault(key, {"func_or_class_name": key, "type": row["type"], "state_counts": {}})
        entry["state_counts"][row["state"]] = entry["state_counts"].get(row["state"], 0) + 1
        if row["type"] in _TOTALS:
            totals[_TOTALS[row["type"]]] += 1
    return {"summary": summary, **totals, "summary_by": "func_name"}


def actors(rows):
    summary = {}
    for row in rows:
        entry = summary.setdefault(row["class_name"], {"class_name": row["class_name"], "state_counts": {}})
        entry["state_counts"][row["state"]] = entry["state_counts"].get(row["state"], 0) + 1
    return {"summary": summary, "total_actors": len(rows), "summary_by": "class"}
