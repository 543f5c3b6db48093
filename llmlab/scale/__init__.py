"""Plan training at scale: interconnects, alpha-beta collectives, a step simulator, a layout
search and scaling curves, checked against published runs."""
