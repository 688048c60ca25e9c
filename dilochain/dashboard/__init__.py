"""``dilochain dashboard``: one web page that shows a run live from the chain."""
