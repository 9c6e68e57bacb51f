"""TF-IDF + logistic regression on the zoo's own sentiment splits: the bar to clear.

Usage: python benchmarks/sentiment_baseline.py --sst2 ../shared/data/sst2 --imdb ../shared/data/imdb

Uses the data modules' ``split()`` so the baseline sees exactly the texts and splits the
attention models see (SST-2: train -> validation; IMDB: the 90% train part -> test). The
regularization strength is picked on the validation split.
"""

from __future__ import annotations

import argparse
import time

from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression

from zoo.datamodules import IMDBDataModule, SST2DataModule, TextClassificationDataModule


def evaluate(data: TextClassificationDataModule, report_split: str) -> tuple[float, float, float]:
    """Fit on train, choose C on validation, return (C, accuracy on report_split, seconds)."""
    start = time.perf_counter()
    train, val, report = data.split("train"), data.split("validation"), data.split(report_split)
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
    x_train = vectorizer.fit_transform(train.texts)
    best = max(
        (LogisticRegression(C=c, max_iter=2000).fit(x_train, train.labels) for c in (0.5, 1.0, 2.0, 4.0, 8.0)),
        key=lambda model: model.score(vectorizer.transform(val.texts), val.labels),
    )
    accuracy = best.score(vectorizer.transform(report.texts), report.labels)
    return best.C, accuracy, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sst2", default=None, help="local SST-2 directory (default: the hub)")
    parser.add_argument("--imdb", default=None, help="local IMDB directory (default: the hub)")
    args = parser.parse_args()
    for name, data, split in (
        ("sst2", SST2DataModule(path=args.sst2), "validation"),
        ("imdb", IMDBDataModule(path=args.imdb), "test"),
    ):
        c, accuracy, seconds = evaluate(data, split)
        print(f"{name}\t{split}\taccuracy={accuracy:.4f}\tC={c}\t{seconds:.0f}s")


if __name__ == "__main__":
    main()
