from llmlab.tables import markdown_table


def test_markdown_table_keeps_column_order_and_values():
    rows = [{"mode": "sync", "stall s": 0.4}, {"mode": "async", "stall s": 0.03}]
    assert markdown_table(rows) == "mode | stall s\n--- | ---\nsync | 0.4\nasync | 0.03"


def test_aligned_markdown_table_pads_columns_and_puts_numbers_right():
    rows = [{"lab": "01_data.ipynb", "wall time": "12.3 s", "peak MB": "-", "why": "fits"},
            {"lab": "02", "wall time": "7.0 s", "peak MB": "1,024", "why": ""}]
    assert markdown_table(rows, aligned=True).splitlines() == [
        "lab           | wall time | peak MB | why",
        "------------- | --------: | ------: | ----",
        "01_data.ipynb |    12.3 s |       - | fits",
        "02            |     7.0 s |   1,024 |",
    ]


def test_aligned_markdown_table_keeps_a_column_of_words_left():
    rows = [{"fit": "yes", "n": 1}, {"fit": "2 tight", "n": 22}]
    assert markdown_table(rows, aligned=True).splitlines() == [
        "fit     |   n", "------- | --:", "yes     |   1", "2 tight |  22"]
