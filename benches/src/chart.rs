//! SVG charts (plotters, SVG backend only).
