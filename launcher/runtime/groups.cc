// Model-parallel and data-parallel groups of a layout; see runtime/groups.h.
#include "runtime/groups.h"

#include <string>

namespace omni::launcher {

Result<Groups> groups_of(const Layout &layout, std::uint32_t unit, std::uint32_t slot,
                         std::uint32_t mp) {
    if (layout.units.empty() || layout.world % layout.units.size() != 0)
        return make_error("model-parallel groups: a layout of " + std::to_string(layout.world) +
                          " ranks in " + std::to_string(layout.units.size()) + " units");
    const auto unit_size = layout.world / static_cast<std::uint32_t>(layout.units.size());
    if (mp == 0 || unit_size % mp != 0)
        return make_error("OMNI_MP=" + std::to_string(mp) + ": must divide the unit size " +
                          std::to_string(unit_size));
    const auto rank = layout.rank_of(unit, slot);
    if (!rank)
        return make_error("model-parallel groups: unit " + std::to_string(unit) + " slot " +
                          std::to_string(slot) + " is not in generation " +
                          std::to_string(layout.generation));
    Groups g;
    g.mp_size = mp;
    g.mp_rank = slot % mp;
    g.replica_in_unit = slot / mp;
    g.dp_size = layout.world / mp;
    const Layout dp = dp_layout(layout, mp, g.mp_rank);
    const auto r = dp.rank_of(unit, g.replica_in_unit);
    if (!r) return make_error("model-parallel groups: no DP rank for unit " + std::to_string(unit));
    g.dp_rank = *r;
    return g;
}

Layout dp_layout(const Layout &layout, std::uint32_t mp, std::uint32_t mp_rank) {
    if (mp <= 1) return layout;
    Layout out;
    out.generation = layout.generation;
    out.units = layout.units;
    for (const Member &m : layout.members) {
        if (m.slot % mp != mp_rank) continue;
        Member c = m;
        c.rank = static_cast<std::uint32_t>(out.members.size());
        c.slot = m.slot / mp;  // the replica inside the unit: rank_of() counts in those
        out.members.push_back(std::move(c));
    }
    out.world = static_cast<std::uint32_t>(out.members.size());
    return out;
}

Decision dp_decision(const Decision &d, std::uint32_t mp, std::uint32_t mp_rank) {
    Decision out = d;
    out.next = dp_layout(d.next, mp, mp_rank);
    return out;
}

}  // namespace omni::launcher
