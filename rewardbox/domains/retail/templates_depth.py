"""Retail task templates with depth: several orders in one request, missing information,
conditions, a change of mind; and ``FAMILIES``, every retail template in order.

They reuse the phrasing helpers and the one-order templates of ``templates``.
"""

from __future__ import annotations

from typing import Any

from rewardbox.domains.authoring import Family, call, task_spec
from rewardbox.domains.retail.builder import WorldBuilder, user_context
from rewardbox.domains.retail.templates import (
    address_change,
    address_refused,
    cancel_explicit,
    cancel_lookup,
    cancel_refused,
    cancel_tell_refund,
    hello,
    return_in_window,
    return_multi_item,
    return_out_of_window,
    return_tier_window,
    tell_value,
    ticket_problem,
    wrong_owner,
)


def multi_action(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.person()
    if k % 2 == 0:
        a, c = b.order(p, "pending"), b.order(p, "processing")
        query = (
            f"{hello(p, k)} Two things: cancel order {a.order_id}, and ship order "
            f"{c.order_id} to my work address."
        )
        golden = [
            call("find_customer", email=p.email),
            call("cancel_order", order_id=a.order_id),
            call("update_shipping_address", order_id=c.order_id, address_id=p.work_id),
        ]
        extra = [f"Work address: {p.work_line1}"]
        goal = (
            f"cancel order {a.order_id} and have order {c.order_id} shipped to your work address."
        )
    else:
        a = b.order(p, "delivered", n_items=2, delivered_ago=b.rng.randint(2, 28))
        c = b.order(p, "pending")
        product = a.products[1]
        query = (
            f"{hello(p, k)} Please return the {product} from order {a.order_id} "
            f"and cancel order {c.order_id}."
        )
        golden = [
            call("find_customer", email=p.email),
            call("get_order", order_id=a.order_id),
            call("return_items", order_id=a.order_id, item_ids=[a.item_id(product)]),
            call("cancel_order", order_id=c.order_id),
        ]
        extra = []
        goal = f"return only the {product} from order {a.order_id} and cancel order {c.order_id}."
    return task_spec(
        query,
        user_context(p, goal, order=f"{a.order_id} and {c.order_id}", extra=extra),
        golden,
        write=True,
    )


# -- depth: missing information, several records, conditions, a change of mind -----------


def forgot_email(b: WorldBuilder, k: int) -> dict[str, Any]:
    """The customer does not remember their email: find them by name and postal code, then act."""
    p = b.person()
    variant = k % 3
    if variant == 0:
        o = b.order(p, "pending")
        ask, golden = f"cancel order {o.order_id}", [call("cancel_order", order_id=o.order_id)]
    elif variant == 1:
        o = b.order(p, "processing")
        ask = f"ship order {o.order_id} to my work address"
        golden = [call("update_shipping_address", order_id=o.order_id, address_id=p.work_id)]
    else:
        o = b.order(p, "delivered", n_items=2, delivered_ago=b.rng.randint(2, 25))
        ask = f"return the {o.products[0]} from order {o.order_id}"
        golden = [
            call("get_order", order_id=o.order_id),
            call("return_items", order_id=o.order_id, item_ids=o.item_ids_of(o.products[:1])),
        ]
    b.distractors(p, 1)
    opening = (
        "Hi, this is {name}. I can't remember which email I used, but my postal code is {zip}.",
        "Hello, {name} here. I don't know my account email anymore; I live in postal code {zip}.",
        "Hi, I'm {name}, postal code {zip} (no idea which email I signed up with).",
    )[k % 3]
    return task_spec(
        f"{opening.format(name=p.name, zip=p.home_postal)} Please {ask}.",
        user_context(
            p,
            f"{ask}.",
            order=o.order_id,
            extra=[f"Postal code: {p.home_postal}", f"Work address: {p.work_line1}"],
            knows_email=False,
        ),
        [call("find_customer_by_name", full_name=p.name, postal_code=p.home_postal), *golden],
        write=True,
    )


def order_cleanup(b: WorldBuilder, k: int) -> dict[str, Any]:
    """Three to five writes over four orders; some orders named only by a product (list_orders)."""
    p = b.person()
    a, c = b.order(p, "pending"), b.order(p, "processing")
    d = b.order(p, "delivered", n_items=3, delivered_ago=b.rng.randint(2, 25))
    extra = b.order(p, "pending") if k % 2 == 1 else None
    back = d.products[: 1 + k % 2]
    by_product = k >= 2
    name_a = f"the order with the {a.products[0]}" if by_product else f"order {a.order_id}"
    cancel = f"cancel {name_a}" + (f" and order {extra.order_id}" if extra else "")
    query = (
        f"{hello(p, k)} I'm sorting out my orders: {cancel}, ship order {c.order_id} to my work address, "
        f"and return the {' and the '.join(back)} from order {d.order_id}."
    )
    golden = [call("find_customer", email=p.email)] + (
        [call("list_orders", customer_id=p.customer_id)] if by_product else []
    )
    golden += [call("cancel_order", order_id=a.order_id)]
    golden += [call("cancel_order", order_id=extra.order_id)] if extra else []
    golden += [
        call("update_shipping_address", order_id=c.order_id, address_id=p.work_id),
        call("get_order", order_id=d.order_id),
        call("return_items", order_id=d.order_id, item_ids=d.item_ids_of(back)),
    ]
    goal = (
        f"{cancel}, have order {c.order_id} shipped to your work address, and return the "
        f"{' and the '.join(back)} from order {d.order_id} (keep the rest)."
    )
    return task_spec(
        query,
        user_context(
            p,
            goal,
            order=", ".join(o.order_id for o in (a, c, d, extra) if o),
            extra=[f"Work address: {p.work_line1}"],
        ),
        golden,
        write=True,
    )


def conditional_cancel(b: WorldBuilder, k: int) -> dict[str, Any]:
    """Cancel if not shipped, else return: the status decides which write (or none, while in transit)."""
    p = b.person()
    status = ("processing", "delivered", "shipped", "pending")[k % 4]
    o = b.order(
        p, status, n_items=2, delivered_ago=b.rng.randint(2, 20) if status == "delivered" else None
    )
    product = o.products[0]
    golden = [call("find_customer", email=p.email), call("get_order", order_id=o.order_id)]
    if status in ("pending", "processing"):
        golden.append(call("cancel_order", order_id=o.order_id))
    elif status == "delivered":
        golden.append(call("return_items", order_id=o.order_id, item_ids=o.item_ids_of([product])))
    query = (
        f"{hello(p, k)} About order {o.order_id}: if it hasn't shipped yet, please cancel it. If it has "
        f"already arrived, I'd like to return just the {product} instead."
    )
    return task_spec(
        query,
        user_context(
            p,
            f"cancel order {o.order_id} if it has not shipped; if it was delivered, "
            f"return only the {product}; otherwise nothing.",
            order=o.order_id,
        ),
        golden,
        write=status != "shipped",
    )


def change_of_mind(b: WorldBuilder, k: int) -> dict[str, Any]:
    """The customer corrects themself in the first message: only the second order is cancelled."""
    p = b.person()
    first, second = b.order(p, "pending"), b.order(p, ("processing", "pending")[k % 2])
    b.distractors(p, 1)
    turn = (
        "Sorry, wait, wrong number: I meant {b}. Please keep {a} and cancel {b} instead.",
        "Actually, scratch that: {a} stays. It's {b} I want cancelled.",
        "Hmm, no, my mistake, keep {a}; cancel {b}.",
    )[k % 3]
    return task_spec(
        f"{hello(p, k)} Please cancel order {first.order_id}. "
        + turn.format(a=first.order_id, b=second.order_id),
        user_context(
            p,
            f"cancel order {second.order_id} and keep order {first.order_id} (you named "
            f"{first.order_id} by mistake first).",
            order=f"{first.order_id} and {second.order_id}",
        ),
        [call("find_customer", email=p.email), call("cancel_order", order_id=second.order_id)],
        write=True,
    )


FAMILIES: tuple[Family, ...] = (
    Family("cancel_explicit", "retail_cancel.py", "trivial", cancel_explicit),
    Family("cancel_lookup", "retail_cancel.py", "easy", cancel_lookup),
    Family("cancel_refused", "retail_cancel.py", "medium", cancel_refused),
    Family("cancel_tell_refund", "retail_cancel.py", "medium", cancel_tell_refund, held_out=True),
    Family("address_change", "retail_address.py", "easy", address_change),
    Family("address_refused", "retail_address.py", "medium", address_refused),
    Family("return_in_window", "retail_returns.py", "medium", return_in_window),
    Family("return_multi_item", "retail_returns.py", "hard", return_multi_item),
    Family("return_tier_window", "retail_returns.py", "hard", return_tier_window, held_out=True),
    Family("return_out_of_window", "retail_returns.py", "hard", return_out_of_window),
    Family("ticket_problem", "retail_tickets.py", "medium", ticket_problem),
    Family("tell_value", "retail_info.py", "easy", tell_value),
    Family("wrong_owner", "retail_security.py", "hard", wrong_owner),
    Family("multi_action", "retail_multi.py", "hard", multi_action),
    Family("forgot_email", "retail_account.py", "medium", forgot_email, 3),
    Family("order_cleanup", "retail_multi.py", "hard", order_cleanup, 6),
    Family("conditional_cancel", "retail_cancel.py", "hard", conditional_cancel),
    Family("change_of_mind", "retail_cancel.py", "medium", change_of_mind, 3),
)
"""Every template, in the order tasks are numbered and written."""
