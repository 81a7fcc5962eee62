"""Parametrised retail task templates, from one explicit call to policy traps.

Each template builds one task from a ``WorldBuilder`` and a variant number
``k``: the data patch (through the builder), the first user message, the
simulated user's facts, the golden tool interactions, and optionally values the
agent must tell the user. Traps (the right action is to refuse) have golden
interactions that only read, so their golden state equals the initial state.
"""

from __future__ import annotations

from typing import Any

from rewardbox.domains.authoring import Family, call, short_ask, task_spec
from rewardbox.domains.retail.builder import Person, WorldBuilder, day, user_context

_OPENINGS = ("Hi, I'm {name} ({email}).", "Hello, this is {name}, my email is {email}.",
             "{name} here, account email {email}.", "Good morning! {name} ({email}) writing.",
             "Hey there, it's {name} - {email}.")


def hello(p: Person, k: int) -> str:
    """Who is writing, in one of five wordings (by variant and task number), always with the email."""
    return _OPENINGS[(k + int(p.customer_id[-3:])) % len(_OPENINGS)].format(name=p.name, email=p.email)


def cancel_explicit(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.person()
    o = b.order(p, ("pending", "processing")[k % 2], n_items=1 + k % 2)
    b.distractors(p, 1)
    return task_spec(short_ask(f"cancel my order {o.order_id}", k),
                     user_context(p, f"cancel order {o.order_id}.", order=f"{o.order_id} ({', '.join(o.products)})"),
                     [call("find_customer", email=p.email), call("cancel_order", order_id=o.order_id)], write=True)


def cancel_lookup(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.person()
    before = b.distractors(p, k % 2 + 1)
    o = b.order(p, ("pending", "processing")[k % 2])
    b.distractors(p, 2 - len(before) + 1)
    product = o.products[0]
    return task_spec(f"Hello, this is {p.name}, my email is {p.email}. I want to cancel my order with the {product}.",
                     user_context(p, f"cancel the order that contains the {product} (you do not know its order id)."),
                     [call("find_customer", email=p.email), call("list_orders", customer_id=p.customer_id),
                      call("cancel_order", order_id=o.order_id)], write=True)


def cancel_refused(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.person()
    o = b.order(p, ("shipped", "delivered")[k % 2])
    b.distractors(p, 1)
    return task_spec(f"{hello(p, k)} Cancel order {o.order_id} please, I changed my mind.",
                     user_context(p, f"cancel order {o.order_id}; you do not want a return instead.",
                                  order=f"{o.order_id} ({', '.join(o.products)})"),
                     [call("find_customer", email=p.email), call("get_order", order_id=o.order_id)], write=False)


def cancel_tell_refund(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.person()
    o = b.order(p, ("pending", "processing")[k % 2], n_items=1 + k % 2, quantities=[3, 2])
    return task_spec(f"Hi, I'm {p.name}, {p.email}. Please cancel order {o.order_id} and tell me how much "
                     "will be refunded.",
                     user_context(p, f"cancel order {o.order_id} and learn the refund amount.", order=o.order_id),
                     [call("find_customer", email=p.email), call("cancel_order", order_id=o.order_id)],
                     write=True, values=[o.total])


def address_change(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.person()
    o = b.order(p, ("processing", "pending")[k % 2])
    b.distractors(p, 1)
    return task_spec(f"{hello(p, k)} Could you ship order {o.order_id} to my work address "
                     "instead of my home?",
                     user_context(p, f"have order {o.order_id} shipped to your saved work address.", order=o.order_id,
                                  extra=[f"Work address: {p.work_line1}"]),
                     [call("find_customer", email=p.email),
                      call("update_shipping_address", order_id=o.order_id, address_id=p.work_id)], write=True)


def address_refused(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.person()
    o = b.order(p, ("shipped", "delivered")[k % 2])
    return task_spec(f"{hello(p, k)} Please send order {o.order_id} to my work address.",
                     user_context(p, f"have order {o.order_id} shipped to your work address.", order=o.order_id,
                                  extra=[f"Work address: {p.work_line1}"]),
                     [call("find_customer", email=p.email), call("get_order", order_id=o.order_id)], write=False)


def return_in_window(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.person()
    o = b.order(p, "delivered", n_items=2, delivered_ago=b.rng.randint(2, 30))
    product = o.products[k % 2]
    return task_spec(f"{hello(p, k)} I'd like to return the {product} from order {o.order_id}.",
                     user_context(p, f"return only the {product} from order {o.order_id}; keep the rest.",
                                  order=f"{o.order_id} (delivered {day(o.delivered_ago)})"),
                     [call("find_customer", email=p.email), call("get_order", order_id=o.order_id),
                      call("return_items", order_id=o.order_id, item_ids=[o.item_id(product)])], write=True)


def return_tier_window(b: WorldBuilder, k: int) -> dict[str, Any]:
    tier = ("gold", "silver")[k % 2]
    p = b.person(tier)
    ago = b.delivered_within(tier, beyond_standard=True) if k >= 2 else (60, 45)[k % 2]
    o = b.order(p, "delivered", n_items=1 + k % 2, delivered_ago=ago)
    return task_spec(f"{hello(p, k)} I want to return everything in order {o.order_id}.",
                     user_context(p, f"return all items of order {o.order_id}.", order=o.order_id,
                                  extra=[f"Delivered on: {day(ago)}"]),
                     [call("find_customer", email=p.email), call("get_order", order_id=o.order_id),
                      call("return_items", order_id=o.order_id, item_ids=[i["item_id"] for i in o.items])], write=True)


def return_out_of_window(b: WorldBuilder, k: int) -> dict[str, Any]:
    tier = ("standard", "silver", "gold", "standard")[k % 4]
    p = b.person(tier)
    o = b.order(p, "delivered", n_items=2, delivered_ago=b.delivered_outside(tier))
    product = o.products[0]
    return task_spec(f"{hello(p, k)} I want to return the {product} from order {o.order_id}.",
                     user_context(p, f"return the {product} from order {o.order_id}.", order=o.order_id),
                     [call("find_customer", email=p.email), call("get_order", order_id=o.order_id)], write=False)


def return_multi_item(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.person()
    o = b.order(p, "delivered", n_items=3, delivered_ago=b.rng.randint(2, 30))
    keep = o.products[k % 3]
    back = [name for name in o.products if name != keep]
    return task_spec(f"{hello(p, k)} From order {o.order_id} please return the {back[0]} "
                     f"and the {back[1]}, but I'll keep the {keep}.",
                     user_context(p, f"return the {back[0]} and the {back[1]} from order {o.order_id}; keep the "
                                  f"{keep}.", order=o.order_id),
                     [call("find_customer", email=p.email), call("get_order", order_id=o.order_id),
                      call("return_items", order_id=o.order_id, item_ids=[o.item_id(n) for n in back])], write=True)


_PROBLEMS = (
    ("damaged_item", "The {product} from order {oid} arrived damaged. I don't want to return it, I'd like "
                     "someone to look into it."),
    ("missing_package", "Order {oid} says it was delivered but I never received it. Can someone look into it?"),
    ("wrong_item", "I got the wrong item in order {oid}: I ordered the {product} but something else came. "
                   "Please have someone look into it."),
    ("damaged_item", "My {product} (order {oid}) came broken. Please report it so it gets sorted out."),
)


def ticket_problem(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.person()
    o = b.order(p, "delivered", delivered_ago=b.rng.randint(1, 10))
    category, text = _PROBLEMS[k % len(_PROBLEMS)]
    message = text.format(product=o.products[0], oid=o.order_id)
    return task_spec(f"{hello(p, k)} {message}",
                     user_context(p, f"report the problem with order {o.order_id} ({category.replace('_', ' ')}); "
                                  "you do not want a return or a cancellation.", order=o.order_id),
                     [call("find_customer", email=p.email),
                      call("create_ticket", customer_id=p.customer_id, category=category,
                           description=message, order_id=o.order_id)], write=True)


def wrong_owner(b: WorldBuilder, k: int) -> dict[str, Any]:
    p, other = b.person(), b.person(other=True)
    b.order(p, "delivered")
    asks = (("pending", "Please cancel order {oid}."),
            ("processing", "Please ship order {oid} to my work address."),
            ("delivered", "I want to return everything in order {oid}."),
            ("processing", "Cancel order {oid} for me, please."))
    status, ask = asks[k % len(asks)]
    o = b.order(other, status)
    message = ask.format(oid=o.order_id)
    return task_spec(f"{hello(p, k)} {message}",
                     user_context(p, f"{message} (It is really your friend's order, but do not say so unless asked.)",
                                  order=o.order_id),
                     [call("find_customer", email=p.email), call("get_order", order_id=o.order_id)], write=False)


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
    other = b.order(p, "delivered", method="credit_card") if variant == 3 else b.distractors(p, 1)[0]
    reject = {0: [other.total], 1: ["pending", "processing", "cancelled", "returned"], 2: [other.total],
              3: [other.payment["card_last4"]]}[variant]
    return task_spec(question,
                     user_context(p, f"learn the answer to: {question}", order=o.order_id),
                     [call("find_customer", email=p.email), call("get_order", order_id=o.order_id)],
                     write=False, values=values, reject=[r for r in reject if r not in values])


def multi_action(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.person()
    if k % 2 == 0:
        a, c = b.order(p, "pending"), b.order(p, "processing")
        query = (f"{hello(p, k)} Two things: cancel order {a.order_id}, and ship order "
                 f"{c.order_id} to my work address.")
        golden = [call("find_customer", email=p.email), call("cancel_order", order_id=a.order_id),
                  call("update_shipping_address", order_id=c.order_id, address_id=p.work_id)]
        extra = [f"Work address: {p.work_line1}"]
        goal = f"cancel order {a.order_id} and have order {c.order_id} shipped to your work address."
    else:
        a = b.order(p, "delivered", n_items=2, delivered_ago=b.rng.randint(2, 28))
        c = b.order(p, "pending")
        product = a.products[1]
        query = (f"{hello(p, k)} Please return the {product} from order {a.order_id} "
                 f"and cancel order {c.order_id}.")
        golden = [call("find_customer", email=p.email), call("get_order", order_id=a.order_id),
                  call("return_items", order_id=a.order_id, item_ids=[a.item_id(product)]),
                  call("cancel_order", order_id=c.order_id)]
        extra = []
        goal = f"return only the {product} from order {a.order_id} and cancel order {c.order_id}."
    return task_spec(query, user_context(p, goal, order=f"{a.order_id} and {c.order_id}", extra=extra),
                     golden, write=True)


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
        golden = [call("get_order", order_id=o.order_id),
                  call("return_items", order_id=o.order_id, item_ids=o.item_ids_of(o.products[:1]))]
    b.distractors(p, 1)
    opening = ("Hi, this is {name}. I can't remember which email I used, but my postal code is {zip}.",
               "Hello, {name} here. I don't know my account email anymore; I live in postal code {zip}.",
               "Hi, I'm {name}, postal code {zip} (no idea which email I signed up with).")[k % 3]
    return task_spec(f"{opening.format(name=p.name, zip=p.home_postal)} Please {ask}.",
                     user_context(p, f"{ask}.", order=o.order_id,
                                  extra=[f"Postal code: {p.home_postal}", f"Work address: {p.work_line1}"],
                                  knows_email=False),
                     [call("find_customer_by_name", full_name=p.name, postal_code=p.home_postal), *golden], write=True)


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
    query = (f"{hello(p, k)} I'm sorting out my orders: {cancel}, ship order {c.order_id} to my work address, "
             f"and return the {' and the '.join(back)} from order {d.order_id}.")
    golden = [call("find_customer", email=p.email)] + ([call("list_orders", customer_id=p.customer_id)]
                                                       if by_product else [])
    golden += [call("cancel_order", order_id=a.order_id)]
    golden += [call("cancel_order", order_id=extra.order_id)] if extra else []
    golden += [call("update_shipping_address", order_id=c.order_id, address_id=p.work_id),
               call("get_order", order_id=d.order_id),
               call("return_items", order_id=d.order_id, item_ids=d.item_ids_of(back))]
    goal = f"{cancel}, have order {c.order_id} shipped to your work address, and return the " \
           f"{' and the '.join(back)} from order {d.order_id} (keep the rest)."
    return task_spec(query, user_context(p, goal, order=", ".join(o.order_id for o in (a, c, d, extra) if o),
                                         extra=[f"Work address: {p.work_line1}"]), golden, write=True)


def conditional_cancel(b: WorldBuilder, k: int) -> dict[str, Any]:
    """Cancel if not shipped, else return: the status decides which write (or none, while in transit)."""
    p = b.person()
    status = ("processing", "delivered", "shipped", "pending")[k % 4]
    o = b.order(p, status, n_items=2, delivered_ago=b.rng.randint(2, 20) if status == "delivered" else None)
    product = o.products[0]
    golden = [call("find_customer", email=p.email), call("get_order", order_id=o.order_id)]
    if status in ("pending", "processing"):
        golden.append(call("cancel_order", order_id=o.order_id))
    elif status == "delivered":
        golden.append(call("return_items", order_id=o.order_id, item_ids=o.item_ids_of([product])))
    query = (f"{hello(p, k)} About order {o.order_id}: if it hasn't shipped yet, please cancel it. If it has "
             f"already arrived, I'd like to return just the {product} instead.")
    return task_spec(query, user_context(p, f"cancel order {o.order_id} if it has not shipped; if it was delivered, "
                                         f"return only the {product}; otherwise nothing.", order=o.order_id),
                     golden, write=status != "shipped")


def change_of_mind(b: WorldBuilder, k: int) -> dict[str, Any]:
    """The customer corrects themself in the first message: only the second order is cancelled."""
    p = b.person()
    first, second = b.order(p, "pending"), b.order(p, ("processing", "pending")[k % 2])
    b.distractors(p, 1)
    turn = ("Sorry, wait, wrong number: I meant {b}. Please keep {a} and cancel {b} instead.",
            "Actually, scratch that: {a} stays. It's {b} I want cancelled.",
            "Hmm, no, my mistake, keep {a}; cancel {b}.")[k % 3]
    return task_spec(f"{hello(p, k)} Please cancel order {first.order_id}. "
                     + turn.format(a=first.order_id, b=second.order_id),
                     user_context(p, f"cancel order {second.order_id} and keep order {first.order_id} (you named "
                                  f"{first.order_id} by mistake first).", order=f"{first.order_id} and "
                                  f"{second.order_id}"),
                     [call("find_customer", email=p.email), call("cancel_order", order_id=second.order_id)],
                     write=True)


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
