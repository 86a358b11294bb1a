"""The first-run demo: every process of the product on embedded defaults."""
