"""Parametrised retail task templates, from one explicit call to policy traps.

Each template builds one task from a ``WorldBuilder`` and a variant number
``k``: the data patch (through the builder), the first user message, the
simulated user's facts, the golden tool interactions, and optionally values the
agent must tell the user. Traps (the right action is to refuse) have golden
interactions that only read, so their golden state equals the initial state.
The templates with depth and the ordered ``FAMILIES`` are in ``templates_depth``.
"""

from __future__ import annotations

from typing import Any

from rewardbox.domains.authoring import call, short_ask, task_spec
from rewardbox.domains.retail.builder import Person, WorldBuilder, day, user_context

_OPENINGS = (
    "Hi, I'm {name} ({email}).",
    "Hello, this is {name}, my email is {email}.",
    "{name} here, account email {email}.",
    "Good morning! {name} ({email}) writing.",
    "Hey there, it's {name} - {email}.",
)


def hello(p: Person, k: int) -> str:
    """Who is writing, in one of five wordings (by variant and task number), always with the email."""
    return _OPENINGS[(k + int(p.customer_id[-3:])) % len(_OPENINGS)].format(
        name=p.name, email=p.email
    )


def cancel_explicit(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.person()
    o = b.order(p, ("pending", "processing")[k % 2], n_items=1 + k % 2)
    b.distractors(p, 1)
    return task_spec(
        short_ask(f"cancel my order {o.order_id}", k),
        user_context(
            p, f"cancel order {o.order_id}.", order=f"{o.order_id} ({', '.join(o.products)})"
        ),
        [call("find_customer", email=p.email), call("cancel_order", order_id=o.order_id)],
        write=True,
    )


def cancel_lookup(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.person()
    before = b.distractors(p, k % 2 + 1)
    o = b.order(p, ("pending", "processing")[k % 2])
    b.distractors(p, 2 - len(before) + 1)
    product = o.products[0]
    return task_spec(
        f"Hello, this is {p.name}, my email is {p.email}. I want to cancel my order with the {product}.",
        user_context(
            p, f"cancel the order that contains the {product} (you do not know its order id)."
        ),
        [
            call("find_customer", email=p.email),
            call("list_orders", customer_id=p.customer_id),
            call("cancel_order", order_id=o.order_id),
        ],
        write=True,
    )


def cancel_refused(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.person()
    o = b.order(p, ("shipped", "delivered")[k % 2])
    b.distractors(p, 1)
    return task_spec(
        f"{hello(p, k)} Cancel order {o.order_id} please, I changed my mind.",
        user_context(
            p,
            f"cancel order {o.order_id}; you do not want a return instead.",
            order=f"{o.order_id} ({', '.join(o.products)})",
        ),
        [call("find_customer", email=p.email), call("get_order", order_id=o.order_id)],
        write=False,
    )


def cancel_tell_refund(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.person()
    o = b.order(p, ("pending", "processing")[k % 2], n_items=1 + k % 2, quantities=[3, 2])
    return task_spec(
        f"Hi, I'm {p.name}, {p.email}. Please cancel order {o.order_id} and tell me how much "
        "will be refunded.",
        user_context(
            p, f"cancel order {o.order_id} and learn the refund amount.", order=o.order_id
        ),
        [call("find_customer", email=p.email), call("cancel_order", order_id=o.order_id)],
        write=True,
        values=[o.total],
    )


def address_change(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.person()
    o = b.order(p, ("processing", "pending")[k % 2])
    b.distractors(p, 1)
    return task_spec(
        f"{hello(p, k)} Could you ship order {o.order_id} to my work address instead of my home?",
        user_context(
            p,
            f"have order {o.order_id} shipped to your saved work address.",
            order=o.order_id,
            extra=[f"Work address: {p.work_line1}"],
        ),
        [
            call("find_customer", email=p.email),
            call("update_shipping_address", order_id=o.order_id, address_id=p.work_id),
        ],
        write=True,
    )


def address_refused(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.person()
    o = b.order(p, ("shipped", "delivered")[k % 2])
    return task_spec(
        f"{hello(p, k)} Please send order {o.order_id} to my work address.",
        user_context(
            p,
            f"have order {o.order_id} shipped to your work address.",
            order=o.order_id,
            extra=[f"Work address: {p.work_line1}"],
        ),
        [call("find_customer", email=p.email), call("get_order", order_id=o.order_id)],
        write=False,
    )


def return_in_window(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.person()
    o = b.order(p, "delivered", n_items=2, delivered_ago=b.rng.randint(2, 30))
    product = o.products[k % 2]
    return task_spec(
        f"{hello(p, k)} I'd like to return the {product} from order {o.order_id}.",
        user_context(
            p,
            f"return only the {product} from order {o.order_id}; keep the rest.",
            order=f"{o.order_id} (delivered {day(o.delivered_ago)})",
        ),
        [
            call("find_customer", email=p.email),
            call("get_order", order_id=o.order_id),
            call("return_items", order_id=o.order_id, item_ids=[o.item_id(product)]),
        ],
        write=True,
    )


def return_tier_window(b: WorldBuilder, k: int) -> dict[str, Any]:
    tier = ("gold", "silver")[k % 2]
    p = b.person(tier)
    ago = b.delivered_within(tier, beyond_standard=True) if k >= 2 else (60, 45)[k % 2]
    o = b.order(p, "delivered", n_items=1 + k % 2, delivered_ago=ago)
    return task_spec(
        f"{hello(p, k)} I want to return everything in order {o.order_id}.",
        user_context(
            p,
            f"return all items of order {o.order_id}.",
            order=o.order_id,
            extra=[f"Delivered on: {day(ago)}"],
        ),
        [
            call("find_customer", email=p.email),
            call("get_order", order_id=o.order_id),
            call("return_items", order_id=o.order_id, item_ids=[i["item_id"] for i in o.items]),
        ],
        write=True,
    )


def return_out_of_window(b: WorldBuilder, k: int) -> dict[str, Any]:
    tier = ("standard", "silver", "gold", "standard")[k % 4]
    p = b.person(tier)
    o = b.order(p, "delivered", n_items=2, delivered_ago=b.delivered_outside(tier))
    product = o.products[0]
    return task_spec(
        f"{hello(p, k)} I want to return the {product} from order {o.order_id}.",
        user_context(p, f"return the {product} from order {o.order_id}.", order=o.order_id),
        [call("find_customer", email=p.email), call("get_order", order_id=o.order_id)],
        write=False,
    )


def return_multi_item(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.person()
    o = b.order(p, "delivered", n_items=3, delivered_ago=b.rng.randint(2, 30))
    keep = o.products[k % 3]
    back = [name for name in o.products if name != keep]
    return task_spec(
        f"{hello(p, k)} From order {o.order_id} please return the {back[0]} "
        f"and the {back[1]}, but I'll keep the {keep}.",
        user_context(
            p,
            f"return the {back[0]} and the {back[1]} from order {o.order_id}; keep the {keep}.",
            order=o.order_id,
        ),
        [
            call("find_customer", email=p.email),
            call("get_order", order_id=o.order_id),
            call("return_items", order_id=o.order_id, item_ids=[o.item_id(n) for n in back]),
        ],
        write=True,
    )


_PROBLEMS = (
    (
        "damaged_item",
        "The {product} from order {oid} arrived damaged. I don't want to return it, I'd like "
        "someone to look into it.",
    ),
    (
        "missing_package",
        "Order {oid} says it was delivered but I never received it. Can someone look into it?",
    ),
    (
        "wrong_item",
        "I got the wrong item in order {oid}: I ordered the {product} but something else came. "
        "Please have someone look into it.",
    ),
    (
        "damaged_item",
        "My {product} (order {oid}) came broken. Please report it so it gets sorted out.",
    ),
)


def ticket_problem(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.person()
    o = b.order(p, "delivered", delivered_ago=b.rng.randint(1, 10))
    category, text = _PROBLEMS[k % len(_PROBLEMS)]
    message = text.format(product=o.products[0], oid=o.order_id)
    return task_spec(
        f"{hello(p, k)} {message}",
        user_context(
            p,
            f"report the problem with order {o.order_id} ({category.replace('_', ' ')}); "
            "you do not want a return or a cancellation.",
            order=o.order_id,
        ),
        [
            call("find_customer", email=p.email),
            call(
                "create_ticket",
                customer_id=p.customer_id,
                category=category,
                description=message,
                order_id=o.order_id,
            ),
        ],
        write=True,
    )


def wrong_owner(b: WorldBuilder, k: int) -> dict[str, Any]:
    p, other = b.person(), b.person(other=True)
    b.order(p, "delivered")
    asks = (
        ("pending", "Please cancel order {oid}."),
        ("processing", "Please ship order {oid} to my work address."),
        ("delivered", "I want to return everything in order {oid}."),
        ("processing", "Cancel order {oid} for me, please."),
    )
    status, ask = asks[k % len(asks)]
    o = b.order(other, status)
    message = ask.format(oid=o.order_id)
    return task_spec(
        f"{hello(p, k)} {message}",
        user_context(
            p,
            f"{message} (It is really your friend's order, but do not say so unless asked.)",
            order=o.order_id,
        ),
        [call("find_customer", email=p.email), call("get_order", order_id=o.order_id)],
        write=False,
    )


def tell_value(b: WorldBuilder, k: int) -> dict[str, Any]:
    """Tell one value of an order; the other order's value, or another status, is a wrong answer."""
    p = b.person()
    variant = k % 4
    if variant == 0:
        o = b.order(p, "processing", n_items=2, quantities=[3, 1])
        question, values = f"What was the total of my order {o.order_id}?", [o.total]
    elif variant == 1:
        o = b.order(p, "shipped")
        question, values = f"What is the status of my order {o.order_id}?", ["shipped"]
    elif variant == 2:
        o = b.order(p, "returned", n_items=2)
        b.refund(o, "return")
        question, values = f"How much was refunded for order {o.order_id}?", [o.total]
    else:
        o = b.order(p, "delivered", method="credit_card")
        question = f"Which card did I pay order {o.order_id} with? Just the last four digits."
        values = [o.payment["card_last4"]]
    other = (
        b.order(p, "delivered", method="credit_card") if variant == 3 else b.distractors(p, 1)[0]
    )
    reject = {
        0: [other.total],
        1: ["pending", "processing", "cancelled", "returned"],
        2: [other.total],
        3: [other.payment["card_last4"]],
    }[variant]
    return task_spec(
        question,
        user_context(p, f"learn the answer to: {question}", order=o.order_id),
        [call("find_customer", email=p.email), call("get_order", order_id=o.order_id)],
        write=False,
        values=values,
        reject=[r for r in reject if r not in values],
    )
