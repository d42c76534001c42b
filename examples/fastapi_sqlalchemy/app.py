"""An order and its confirmation in one transaction: FastAPI, a SQLAlchemy ``Session``
and ``tidings.contrib.sqlalchemy``.

``POST /orders`` writes the order, notifies, then writes its lines, all in one
transaction: a line with a quantity of 0 breaks the table's CHECK, the transaction
rolls back, and there is neither an order nor a notification. The endpoint is a plain
``def`` (FastAPI runs it in a thread), so the session is a sync one and the notify
goes through a ``tidings.Client``, written in that thread on the session's connection.

Run it: see README.md.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from pydantic import BaseModel, Field
from sqlalchemy import CheckConstraint, ForeignKey, create_engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

import tidings
from tidings.contrib import sqlalchemy as tsa

HERE = Path(__file__).resolve().parent


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "shop_orders"

    id: Mapped[int] = mapped_column(primary_key=True)
    customer_id: Mapped[str]
    email: Mapped[str]


class OrderLine(Base):
    __tablename__ = "shop_order_lines"
    __table_args__ = (CheckConstraint("quantity > 0", name="quantity_positive"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    order_id: Mapped[int] = mapped_column(ForeignKey("shop_orders.id"))
    sku: Mapped[str]
    quantity: Mapped[int]


class LineIn(BaseModel):
    sku: str
    quantity: int


class OrderIn(BaseModel):
    id: int
    customer_id: str
    email: str
    lines: list[LineIn] = Field(min_length=1)


def session(request: Request) -> Iterator[Session]:
    """A session of the app's database, for one request."""
    with request.app.state.sessions() as s:
        yield s


def tidings_settings(database_url: str) -> tidings.Settings:
    """tidings.toml beside this file, its store the app's own database."""
    loaded = tidings.Settings.load(HERE / "tidings.toml")
    return tidings.Settings.parse({**loaded.model_dump(), "store": database_url})


def create_app(database_url: str | None = None) -> FastAPI:
    """The app on ``database_url`` (default: ``$DATABASE_URL``, ``postgresql://…``)."""
    url = database_url or os.environ["DATABASE_URL"]
    # The psycopg 3 driver: the one a notify can join.
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    sessions = sessionmaker(engine)
    client = tidings.Client(tidings_settings(url))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        Base.metadata.create_all(engine)
        yield
        client.close()
        engine.dispose()

    app = FastAPI(title="shop", lifespan=lifespan)
    app.state.sessions = sessions
    app.state.tidings = client  # the app's client (its tests read what it notified)

    @app.post("/orders", status_code=201)
    def place_order(order: OrderIn, db: Annotated[Session, Depends(session)]
                    ) -> dict[str, Any]:
        try:
            with db.begin():
                db.add(Order(id=order.id, customer_id=order.customer_id, email=order.email))
                db.flush()  # the order row first (a second order 1 is refused here)
                keys = tsa.notify(db, client, key=f"order-{order.id}",
                                  recipient={"id": order.customer_id, "email": order.email},
                                  channels=["email"], template="order-confirmed",
                                  data={"order": order.id, "lines": len(order.lines)})
                db.add_all(OrderLine(order_id=order.id, sku=line.sku, quantity=line.quantity)
                           for line in order.lines)
                db.flush()  # a line breaking the CHECK fails here: all of it rolls back
        except IntegrityError as exc:
            raise HTTPException(409, f"order {order.id} refused: {exc.orig}") from None
        return {"order": order.id, "notified": keys}

    return app


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(create_app(), host="127.0.0.1", port=int(os.environ.get("PORT", "8000")))
