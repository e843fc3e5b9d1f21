"""A FastAPI ingress, as in Ray Serve's HTTP guide: routes defined on the deployment class (self is the replica's
instance), path and query parameters, a JSON body, and a route that calls another deployment.

    PYTHONPATH=python/as_ray:python:build/python .venv/bin/python examples/serve/ray_serve_fastapi.py

The last line printed is JSON of what the routes answered.
"""

import argparse
import json
import urllib.request

from fastapi import FastAPI
from pydantic import BaseModel

from ray import serve
from ray.serve.handle import DeploymentHandle

api = FastAPI()


class Item(BaseModel):
    name: str
    price: float
    quantity: int = 1


@serve.deployment
class Pricing:
    def total(self, price: float, quantity: int) -> float:
        return round(price * quantity * 1.2, 2)


@serve.deployment
@serve.ingress(api)
class Shop:
    def __init__(self, pricing: DeploymentHandle, currency: str):
        self.pricing = pricing
        self.currency = currency

    @api.get("/hello")
    def hello(self, name: str = "world") -> dict:
        return {"message": f"hello {name}"}

    @api.get("/items/{item_id}")
    def item(self, item_id: int, detail: bool = False) -> dict:
        return {"item_id": item_id, "detail": detail, "currency": self.currency}

    @api.post("/quote")
    async def quote(self, item: Item) -> dict:
        total = await self.pricing.total.remote(item.price, item.quantity)
        return {"name": item.name, "total": total, "currency": self.currency}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the Serve HTTP address (the ingress)")
    args = parser.parse_args()

    serve.run(Shop.bind(Pricing.bind(), "EUR"), name="shop", route_prefix="/shop")
    base = f"{args.url}/shop"
    hello = json.loads(urllib.request.urlopen(f"{base}/hello?name=ray").read())
    item = json.loads(urllib.request.urlopen(f"{base}/items/42?detail=true").read())
    body = json.dumps({"name": "book", "price": 10.0, "quantity": 3}).encode()
    quote = json.loads(urllib.request.urlopen(urllib.request.Request(
        f"{base}/quote", data=body, headers={"Content-Type": "application/json"})).read())
    print(json.dumps({"hello": hello, "item": item, "quote": quote}))


if __name__ == "__main__":
    main()
