"""The journal's model calls: each call a proposer made, its tokens and dollars, and the
experiment it became; every figure of spend assay shows is added up here."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ..usage import Spent, Usage
from .connection import Store


class ModelCallStore(Store):
    """Model calls, recorded one by one and added up in SQL."""

    def add_model_call(self, u: Usage, call: str, session: str) -> int:
        """Record one model call at once (its experiment is linked when it is added)."""
        with self.tx():
            cur = self.conn.execute(
                "INSERT INTO model_calls (ts, session, call, model, tokens_in, tokens_out,"
                " tokens_cached, tokens_cache_write, cost_usd, priced_by, estimated)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (time.time(), session, call, u.model, u.tokens_in, u.tokens_out,
                 u.tokens_cached, u.tokens_cache_write, u.cost_usd, u.priced_by,
                 int(u.estimated)))
            assert cur.lastrowid is not None
            return int(cur.lastrowid)

    def model_calls(self, *, session: str | None = None, experiment_id: str | None = None
                    ) -> list[Usage]:
        """The calls of one session or one experiment (all calls without either)."""
        sql = ("SELECT model, tokens_in, tokens_out, tokens_cached, tokens_cache_write, "
               "cost_usd, priced_by, estimated FROM model_calls")
        where, args = [], []
        if session is not None:
            where.append("session = ?")
            args.append(session)
        if experiment_id is not None:
            where.append("experiment_id = ?")
            args.append(experiment_id)
        if where:
            sql += " WHERE " + " AND ".join(where)
        rows = self.conn.execute(sql + " ORDER BY id", args).fetchall()
        return [Usage(r[0], r[1], r[2], r[3], r[4], r[5], r[6], bool(r[7])) for r in rows]

    _SPENT_SUMS = (
        "COUNT(*), COALESCE(SUM(cost_usd), 0), COALESCE(SUM(tokens_in), 0),"
        " COALESCE(SUM(tokens_out), 0), COALESCE(SUM(tokens_cached), 0),"
        " COALESCE(SUM(cost_usd IS NULL AND tokens_in IS NOT NULL AND tokens_out IS NOT NULL),"
        " 0), COALESCE(SUM(tokens_in IS NULL OR tokens_out IS NULL), 0)")

    @staticmethod
    def _spent(r: Sequence[Any]) -> Spent:
        return Spent(calls=int(r[0]), usd=float(r[1]), tokens_in=int(r[2]),
                     tokens_out=int(r[3]), tokens_cached=int(r[4]), unpriced=int(r[5]),
                     unknown=int(r[6]))

    def spent(self, session: str | None = None) -> Spent:
        """The model calls added up (one session's, or the whole journal's), in SQL: every
        figure of tokens or dollars that assay shows is read from here."""
        sql = f"SELECT {self._SPENT_SUMS} FROM model_calls"
        args: tuple[str, ...] = ()
        if session is not None:
            sql += " WHERE session = ?"
            args = (session,)
        return self._spent(self.conn.execute(sql, args).fetchone())

    def spent_by_experiment(self, ids: Sequence[str] | None = None) -> dict[str, Spent]:
        """The model calls of each experiment added up, in SQL (those of ``ids`` only when
        given); an experiment that made no call is absent."""
        sql = (f"SELECT experiment_id, {self._SPENT_SUMS} FROM model_calls"
               " WHERE experiment_id IS NOT NULL")
        args: list[str] = []
        if ids is not None:
            if not ids:
                return {}
            sql += f" AND experiment_id IN ({','.join('?' * len(ids))})"
            args = list(ids)
        rows = self.conn.execute(sql + " GROUP BY experiment_id", args).fetchall()
        return {str(r[0]): self._spent(r[1:]) for r in rows}
