"""Time zones as Spark's session time zone (`spark.sql.session.timeZone`) names them."""

from __future__ import annotations

import re
from datetime import timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from mt_magic.errors import ValidationError

# Java's ZoneId.SHORT_IDS, which Spark's session time zone accepts too ('PST').
SHORT_IDS = {
    "ACT": "Australia/Darwin", "AET": "Australia/Sydney", "AGT": "America/Argentina/Buenos_Aires",
    "ART": "Africa/Cairo", "AST": "America/Anchorage", "BET": "America/Sao_Paulo", "BST": "Asia/Dhaka",
    "CAT": "Africa/Harare", "CNT": "America/St_Johns", "CST": "America/Chicago", "CTT": "Asia/Shanghai",
    "EAT": "Africa/Addis_Ababa", "ECT": "Europe/Paris", "IET": "America/Indiana/Indianapolis",
    "IST": "Asia/Kolkata", "JST": "Asia/Tokyo", "MIT": "Pacific/Apia", "NET": "Asia/Yerevan",
    "NST": "Pacific/Auckland", "PLT": "Asia/Karachi", "PNT": "America/Phoenix", "PRT": "America/Puerto_Rico",
    "PST": "America/Los_Angeles", "SST": "Pacific/Guadalcanal", "VST": "Asia/Ho_Chi_Minh",
    "EST": "-05:00", "MST": "-07:00", "HST": "-10:00",
}


def zone_named(name: str) -> tzinfo:
    """A zone as Spark's session time zone names it: a region, a short ID (PST), or an offset
    (+01:00, GMT-5, UTC+01:00)."""
    name = SHORT_IDS.get(name, name)
    offset = re.fullmatch(r"(?:GMT|UTC)?([+-])(\d{1,2}):?(\d{2})?", name)
    if offset:
        sign = -1 if offset.group(1) == "-" else 1
        return timezone(sign * timedelta(hours=int(offset.group(2)), minutes=int(offset.group(3) or 0)))
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValidationError(f"Time zone '{name}' (spark.sql.session.timeZone) is not known; use a region "
                              "such as 'Europe/Paris' or an offset such as '+01:00'.") from None
