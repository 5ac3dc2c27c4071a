"""Dataset presets: each paper's preprocessing protocol and its published statistics (data only).

Every entry cites the spec section (``../shared/specs/<paper>.md``) its numbers come from. Counts
marked ``includes_pad`` are RecBole printouts that count the [PAD] id as one user and one item:
the real counts are one less (the specs derive this from Avg.N = inter / (users - 1)).
``approximate`` names published values given only to a few digits (e.g. "0.987M").
"""
from __future__ import annotations

from dataclasses import dataclass, field

from recbole_ext.data.filters import FilterSpec


@dataclass(frozen=True)
class Published:
    users: int
    items: int
    interactions: int
    avg_length: float | None = None
    sparsity: float | None = None  # a fraction, as printed (e.g. 0.9993 for "99.93%")
    includes_pad: bool = False     # users/items as printed by RecBole, [PAD] included
    approximate: tuple[str, ...] = ()
    source: str = ""
    # which of our counts the paper's interaction count is: ``interactions`` (rows), or ``reviews``
    # for a CTR set whose paper counts the reviews its rows were built from
    interactions_are: str = "interactions"

    def real(self, key: str) -> int | float | None:
        """The published value in real ids (``includes_pad`` removed from users and items)."""
        value = getattr(self, key)
        if value is not None and self.includes_pad and key in ("users", "items"):
            return value - 1
        return value


@dataclass(frozen=True)
class Preset:
    name: str
    paper: str
    formats: tuple[str, ...]       # input formats the protocol can be rebuilt from
    filters: FilterSpec
    published: Published
    config: str                    # dataset base config, relative to configs/
    keep_unrated_items: bool = False  # write every .item row (RecBole then counts them as items)
    protocol: str = ""             # where the filters come from, when not the statistics' source
    notes: tuple[str, ...] = field(default_factory=tuple)
    inputs: str = "<raw files>"    # what --input takes, for the "create them with" hint

    @property
    def requires(self) -> tuple[str, ...]:
        """Fields the input must have for this protocol."""
        return ("rating",) if self.filters.min_rating is not None else ()


_AMAZON_2014 = ("McAuley's Amazon 2014 {0} ratings: ratings_{1}.csv (--format amazon-ratings), or the same rows as an "
                "atomic .inter (RecBole's Amazon_{1})")
_FEAREC = "FEARec Table 1 (specs/fearec.md §3): 5-core, no rating threshold"
_S3REC = "S3-Rec copy (../shared/datasets/raw/Amazon_*/*.txt, already 5-core) or RecSysDatasets atomic files"

def _denoiser(name: str, users: int, items: int, actions: int, avg_length: float, printed: str,
              formats: tuple[str, ...] = ("amazon-ratings", "atomic"), **extra) -> Preset:
    """Rec-Denoiser's datasets: SASRec/TiSASRec preprocessing, a single-pass >= 5 filter
    (specs/recdenoiser.md §3.1); Table 1 prints the actions to 2-3 digits (``printed``)."""
    return Preset(name, "Rec-Denoiser", formats, FilterSpec(user_min=5, item_min=5, kcore="single"),
                  Published(users, items, actions, avg_length=avg_length, approximate=("interactions",),
                            source=f"Rec-Denoiser Table 1 (specs/recdenoiser.md §3.1; '{printed}')"),
                  f"datasets/{name}.yaml", **extra)


PRESETS: dict[str, Preset] = {p.name: p for p in [
    Preset("fearec-beauty", "FEARec", ("s3rec", "atomic"),
           FilterSpec(user_min=5, item_min=5, kcore="iterative"),
           Published(22363, 12101, 198502, avg_length=8.9, sparsity=0.9993, source=_FEAREC),
           "datasets/fearec-beauty.yaml", notes=(_S3REC,)),
    Preset("fearec-sports", "FEARec", ("s3rec", "atomic"),
           FilterSpec(user_min=5, item_min=5, kcore="iterative"),
           Published(35598, 18357, 296337, avg_length=8.3, sparsity=0.9995, source=_FEAREC),
           "datasets/fearec-sports.yaml", notes=(_S3REC,)),
    Preset("fearec-clothing", "FEARec", ("s3rec", "atomic"),
           FilterSpec(user_min=5, item_min=5, kcore="iterative"),
           Published(39387, 23033, 278677, avg_length=7.1, sparsity=0.9997, source=_FEAREC),
           "datasets/fearec-clothing.yaml", notes=(_S3REC,)),
    Preset("fearec-ml1m", "FEARec", ("ml-seq", "grouplens", "atomic"),
           FilterSpec(user_min=5, item_min=5, kcore="iterative"),
           # 6,041 / 3,417 count [PAD] (specs/fearec.md §3 notes): 6,040 users, 3,416 items.
           Published(6041, 3417, 999611, avg_length=165.5, sparsity=0.9516, includes_pad=True, source=_FEAREC),
           "datasets/fearec-ml1m.yaml",
           notes=("ML-1M order-only copy: ties within one second are in arbitrary order",)),
    Preset("eulerformer-ml1m", "EulerFormer", ("grouplens", "atomic", "ml-seq"),
           # specs/eulerformer.md §3.2: rating >= 3, then iterative 10-core on users and items.
           FilterSpec(min_rating=3, user_min=10, item_min=10, kcore="iterative"),
           Published(6034, 3124, 834449, avg_length=138.31, sparsity=0.9557, includes_pad=True,
                     source="EulerFormer Table 2 (specs/eulerformer.md §3.1)"),
           "datasets/eulerformer-ml1m.yaml", protocol="EulerFormer's RecBole yamls (specs/eulerformer.md §3.2)"),
    Preset("eulerformer-yelp", "EulerFormer", ("atomic",),
           # specs/eulerformer.md §3.2: Yelp2022, rating >= 3, items >= 10, users >= 40.
           FilterSpec(min_rating=3, user_min=40, item_min=10, kcore="iterative"),
           Published(9370, 24627, 811573, avg_length=86.62, sparsity=0.9965, includes_pad=True,
                     source="EulerFormer Table 2 (specs/eulerformer.md §3.1)"),
           "datasets/eulerformer-yelp.yaml", protocol="EulerFormer's RecBole yamls (specs/eulerformer.md §3.2)",
           notes=("needs Yelp2022 (RecBole 'yelp-2022') with columns renamed to user_id/item_id/rating/timestamp; "
                  "the S3-Rec Yelp copy is a different dataset",)),
    Preset("eulerformer-books", "EulerFormer", ("atomic",),
           FilterSpec(min_rating=3, user_min=10, item_min=10, kcore="iterative"),
           Published(543598, 276863, 15035247, avg_length=27.66, sparsity=0.9999, includes_pad=True,
                     source="EulerFormer Table 2 (specs/eulerformer.md §3.1)"),
           "datasets/eulerformer-books.yaml", protocol="EulerFormer's RecBole yamls (specs/eulerformer.md §3.2)",
           inputs="amazon-books.inter",
           notes=("the version is not stated; 15M interactions after filtering suggest Amazon 2018 Books (RecBole "
                  "'amazon-books-18', unverified): an atomic .inter with user_id, item_id, rating and timestamp",)),
    Preset("eulerformer-ml20m", "EulerFormer", ("grouplens", "atomic"),
           FilterSpec(min_rating=3, user_min=10, item_min=10, kcore="iterative"),
           Published(137524, 14259, 16447894, avg_length=119.60, sparsity=0.9916, includes_pad=True,
                     source="EulerFormer Table 2 (specs/eulerformer.md §3.1)"),
           "datasets/eulerformer-ml20m.yaml", protocol="EulerFormer's RecBole yamls (specs/eulerformer.md §3.2)"),
    Preset("linrec-gowalla", "LinRec", ("atomic",),
           # specs/linrec.md §3: RecBole's gowalla-merged with the authors' gowalla.yaml, 5-core on both sides.
           FilterSpec(user_min=5, item_min=5, kcore="iterative"),
           Published(64116, 164533, 2018421, sparsity=0.9998, includes_pad=True,
                     source="LinRec Table 1 (specs/linrec.md §3)"),
           "datasets/linrec-gowalla.yaml", inputs="gowalla-merged.inter",
           notes=("RecBole's gowalla-merged atomic files (repeated check-ins merged); the spec has not checked that "
                  "its 5-core gives the published counts",)),
    Preset("linrec-ml1m", "LinRec", ("ml-seq", "grouplens", "atomic"),
           # specs/linrec.md §3: all 1,000,209 ratings, no filtering; 3,884 items = the .item file's
           # 3,883 movies + [PAD], so the unrated movies stay in the .item file.
           FilterSpec(),
           Published(6041, 3884, 1000209, sparsity=0.9574, includes_pad=True,
                     source="LinRec Table 1 (specs/linrec.md §3)"),
           "datasets/linrec-ml1m.yaml", keep_unrated_items=True),
    _denoiser("denoiser-ml1m", 6040, 3416, 987000, 163.5, "0.987M", ("ml-seq", "grouplens", "atomic"),
              notes=("the paper's 0.987M / 163.5 are below the 999,611 any >=5 filter of ML-1M keeps; "
                     "the spec accepts the deviation",)),
    _denoiser("denoiser-beauty", 51369, 19369, 225000, 4.39, "0.225M", inputs="ratings_Beauty.csv",
              notes=("needs the raw Amazon 2014 Beauty ratings (ratings_Beauty.csv, or RecBole's Amazon_Beauty "
                     "atomic file); the S3-Rec copy is already 5-core",)),
    _denoiser("denoiser-games", 30935, 12111, 200000, 6.46, "0.2M", inputs="ratings_Video_Games.csv",
              notes=(_AMAZON_2014.format("Video Games", "Video_Games"),)),
    _denoiser("denoiser-movies", 40928, 37564, 1050000, 25.55, "1.05M", inputs="ratings_Movies_and_TV.csv",
              notes=(_AMAZON_2014.format("Movies and TV", "Movies_and_TV"),)),
    _denoiser("denoiser-steam", 114796, 8648, 870000, 7.58, "0.87M", ("atomic",), inputs="steam.inter",
              notes=("Steam reviews (Kang & McAuley 2018) as an atomic .inter with user_id, item_id and timestamp "
                     "columns (RecBole's steam files name the item product_id: rename it); the exact raw version "
                     "is unknown (specs/recdenoiser.md §3.1)",)),
    Preset("cape-books", "CAPE", ("amazon-ratings", "atomic"),
           # specs/cape.md §3.3: HLLM's process_books.py counts once on the raw file, keeps users and items
           # with >= 5, then drops the users left with < 5.
           FilterSpec(user_min=5, item_min=5, kcore="single_then_users"),
           Published(694898, 686624, 10053086, source="CAPE's AmazonBooks description (specs/cape.md §3.3)"),
           "datasets/cape-books.yaml", protocol="HLLM's process_books.py (specs/cape.md §3.3)",
           inputs="ratings_Books.csv",
           notes=(_AMAZON_2014.format("Books", "Books"),)),
    Preset("cape-electronics", "CAPE", ("reczoo-ctr",),
           # specs/cape.md §3.1: reczoo AmazonElectronics_x1 is split already (train/test) and FuxiCTR's
           # min_categr_count 1 keeps every id: nothing to filter.
           FilterSpec(),
           Published(192403, 63001, 1689188, interactions_are="reviews",
                     source="CAPE §5.1 dataset description (specs/cape.md §3.1)"),
           "datasets/cape-electronics.yaml", inputs="train.csv test.csv",
           notes=("the paper's 1,689,188 'samples' are the Electronics 5-core reviews, not CTR rows (reczoo: "
                  "2,608,764 train + 384,806 test); compared with the reviews the converter counts",)),
]}


def get_preset(name: str) -> Preset:
    from recbole_ext.errors import DataFormatError, did_you_mean

    if name not in PRESETS:
        raise DataFormatError(f"unknown dataset preset {name!r}{did_you_mean(name, PRESETS)}; "
                              f"known: {', '.join(PRESETS)}")
    return PRESETS[name]
