"""Short names for the jsonio field validators, so the profile modules read like the JSON they check."""

from specsim.jsonio import drop_none, field_int, field_list, field_num, field_opt, field_req, field_str, show

# Field validators live in jsonio (one of each); the short private names keep the profile modules readable.
_req, _show, _num, _int, _str, _list, _opt, _drop_none = (
    field_req,
    show,
    field_num,
    field_int,
    field_str,
    field_list,
    field_opt,
    drop_none,
)
