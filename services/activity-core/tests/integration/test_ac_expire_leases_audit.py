"""expire-leases and its audit entry commit together (issue 30, finding 3): with a fault
on the audit write (ac_testkit.REFUSE_AUDIT) the answer is 503 and no lease ended."""

from __future__ import annotations

from ac_testkit import AppClient, SeededQueue, audit_refused


async def test_expire_leases_whose_audit_write_fails_ends_no_lease(
    api: AppClient, seeded: SeededQueue
) -> None:
    run_id = await seeded.run()
    assert (await api.claim()).status_code == 200
    await seeded.expire_lease(run_id)
    before = await seeded.row(run_id)
    assert before["state"] == "claimed"

    async with audit_refused(seeded.conn):
        refused = await api.http.post("/ops-runs/expire-leases", headers=api.operator_headers())
        assert refused.status_code == 503, refused.text
        assert refused.json()["code"] == "unavailable"
        after = await seeded.row(run_id)
        assert (after["state"], after["claim_owner"], after["attempt"]) == (
            "claimed",
            before["claim_owner"],
            before["attempt"],
        )

    done = await api.http.post("/ops-runs/expire-leases", headers=api.operator_headers())
    assert done.json() == {"reopened": 1, "expired": 0}
    assert (await seeded.row(run_id))["state"] == "open"
    entries = await seeded.conn.fetch("SELECT action, details FROM ops_audit ORDER BY id")
    assert [(e["action"], e["details"]) for e in entries] == [
        ("expire-leases", {"reopened": 1, "expired": 0})
    ]
