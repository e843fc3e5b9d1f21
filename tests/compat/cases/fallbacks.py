"""Label selectors with fallbacks (fallback_strategy): the task or actor runs under its label_selector when a node can
hold it there, else under the first fallback that a node can hold it under; the resources stay the same. The one
node is labelled through ray.init(labels=...)."""

import ray
from harness import case, out, raised

INIT = {"num_cpus": 2, "include_dashboard": False, "labels": {"zone": "b", "tier": "gold"}}


@ray.remote
def where():
    return "ran"


@ray.remote
class Here:
    def ping(self):
        return "pong"


@case(timeout=120)
def the_primary_selector_when_it_matches():
    out(ray.get(where.options(label_selector={"zone": "b"}, fallback_strategy=[{"label_selector": {"zone": "c"}}])
                .remote()))


@case(timeout=120)
def a_fallback_when_the_primary_matches_no_node():
    f = where.options(label_selector={"zone": "a"},
                      fallback_strategy=[{"label_selector": {"zone": "c"}}, {"label_selector": {"tier": "gold"}}])
    out(ray.get(f.remote(), timeout=60))
    actor = Here.options(label_selector={"zone": "a"}, fallback_strategy=[{"label_selector": {"zone": "in(b,c)"}}])
    out(ray.get(actor.remote().ping.remote(), timeout=60))


@case
def bad_fallbacks_are_refused():
    for fallback in ([{"label_selector": {"zone": "in()"}}], [{"resources": {"CPU": 1}}], [{}], ["zone"]):
        e = raised(where.options, fallback_strategy=fallback)
        out(type(e).__name__)
